import type { NoticeStore } from "../../store/store.js";
import {
  claimDueNotices,
  insertNotice,
  nextNoticeDueAt,
  noticesOfClient,
  pruneNotices,
  recordNotice,
} from "../endpoints.js";
import type { SqliteContext } from "./context.js";

/** The NoticeStore on SQLite: operational notices and their outbox. */
export function sqliteNotices(s: SqliteContext): NoticeStore {
  const db = s.database.db;
  return {
    insert: async (row) => insertNotice(db, row),
    claimDue: async (o) => claimDueNotices(db, o),
    record: async (id, token, patch) => recordNotice(db, id, token, patch),
    nextDueAt: async (now) => nextNoticeDueAt(db, now),
    ofClient: async (clientId, limit) => noticesOfClient(db, clientId, limit),
    prune: async (before, batch) => pruneNotices(db, before, batch),
  };
}

import type { SessionStore } from "../../store/store.js";
import { deleteEndedSessions, findSession, insertSession, revokeSession, touchSession } from "../dashboard.js";
import type { SqliteContext } from "./context.js";

/** The SessionStore on SQLite: dashboard sessions. */
export function sqliteSessions(s: SqliteContext): SessionStore {
  const db = s.database.db;
  return {
    open: async (row, now) =>
      db.transaction((tx) => {
        deleteEndedSessions(tx, now);
        insertSession(tx, row);
      }),
    find: async (hash) => findSession(db, hash),
    touch: async (hash, now) => touchSession(db, hash, now),
    revoke: async (hash, now) => revokeSession(db, hash, now),
  };
}

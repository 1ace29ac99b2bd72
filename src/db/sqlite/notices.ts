import { and, asc, desc, eq, gte, inArray, isNull, lt, lte, notInArray, or, sql } from "drizzle-orm";
import { pickWithinRoom } from "../../store/fairness.js";
import type { NoticeClaimOptions, NoticeStore } from "../../store/store.js";
import type { NewNoticeRow, NoticeRow } from "../../store/rows.js";
import type { SqliteContext } from "./context.js";
import { NOTICE_SCAN_FACTOR } from "../kit/claim-window.js";
import type { Db } from "./open.js";
import { notices } from "./schema.js";
import { noticesInDueOrder } from "../kit/claim-order.js";

/** The NoticeStore on SQLite: operational notices and their outbox. */
export function sqliteNotices(s: SqliteContext): NoticeStore {
  const db = s.database.db;
  return {
    insert: async (row) => insert(db, row),
    claimDue: async (o) => claimDue(db, o),
    record: async (id, token, patch) => record(db, id, token, patch),
    nextDueAt: async (now) => nextDueAt(db, now),
    ofClient: async (clientId, limit) => ofClient(db, clientId, limit),
    prune: async (before, batch) => prune(db, before, batch),
  };
}

export function insert(db: Db, row: NewNoticeRow): void {
  db.insert(notices).values(row).run();
}

const claimableNotice = (now: number) =>
  and(
    eq(notices.deliveryStatus, "pending"),
    lte(notices.nextAttemptAt, now),
    or(isNull(notices.claimedUntil), lt(notices.claimedUntil, now)),
  );

/**
 * Claims due notices under a lease, oldest first. With `clientRoom` (the notifier's fair pool), a
 * window of the oldest due notices of clients not left out is picked from in turns, each client
 * within its room (pickWithinRoom, as event claims do), so one client's backlog of notices does not
 * fill the claim ahead of another's.
 */
export function claimDue(db: Db, opts: NoticeClaimOptions): NoticeRow[] {
  if (opts.limit <= 0) return [];
  const lease = { claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token };
  if (!opts.clientRoom) {
    const due = db
      .select({ id: notices.id })
      .from(notices)
      .where(claimableNotice(opts.now))
      .orderBy(asc(notices.nextAttemptAt))
      .limit(opts.limit);
    return db
      .update(notices)
      .set(lease)
      .where(and(sql`${notices.id} IN ${due}`, claimableNotice(opts.now)))
      .returning()
      .all();
  }
  const excluded = opts.excludeClients ?? [];
  const candidates = db
    .select({ id: notices.id, clientId: notices.clientId })
    .from(notices)
    .where(and(claimableNotice(opts.now), excluded.length > 0 ? notInArray(notices.clientId, excluded) : undefined))
    .orderBy(asc(notices.nextAttemptAt), asc(notices.id))
    .limit(opts.limit * NOTICE_SCAN_FACTOR)
    .all();
  const picked = pickWithinRoom(
    candidates.map((c) => ({ ...c, host: "" })),
    opts.limit,
    () => Infinity,
    opts.clientRoom,
  ).map((c) => c.id);
  if (picked.length === 0) return [];
  return noticesInDueOrder(
    db
      .update(notices)
      .set(lease)
      .where(and(inArray(notices.id, picked), claimableNotice(opts.now)))
      .returning()
      .all(),
  );
}

export function record(db: Db, id: string, token: string, patch: Partial<NewNoticeRow>): void {
  db.update(notices)
    .set({ ...patch, claimedUntil: null, claimToken: null })
    .where(and(eq(notices.id, id), eq(notices.claimToken, token)))
    .run();
}

/**
 * When a pending notice can next be claimed: the earliest unleased one's time, or a lease's end
 * when sooner. Leased notices (one client's, hanging) never hide another's that is due before.
 */
export function nextDueAt(db: Db, now: number): number | null {
  const unleased = db
    .select({ at: notices.nextAttemptAt })
    .from(notices)
    .where(and(eq(notices.deliveryStatus, "pending"), or(isNull(notices.claimedUntil), lt(notices.claimedUntil, now))))
    .orderBy(asc(notices.nextAttemptAt))
    .limit(1)
    .all()[0];
  const lease = db
    .select({ until: sql<number | null>`min(${notices.claimedUntil})` })
    .from(notices)
    .where(and(eq(notices.deliveryStatus, "pending"), gte(notices.claimedUntil, now)))
    .all()[0];
  const times = [unleased?.at, lease?.until].filter((t): t is number => t !== null && t !== undefined);
  return times.length === 0 ? null : Math.min(...times);
}

export function ofClient(db: Db, clientId: string, limit: number): NoticeRow[] {
  return db
    .select()
    .from(notices)
    .where(eq(notices.clientId, clientId))
    .orderBy(desc(notices.createdAt), desc(notices.id))
    .limit(limit)
    .all();
}

export function prune(db: Db, before: number, batch: number): number {
  const old = db
    .select({ id: notices.id })
    .from(notices)
    .where(and(lt(notices.createdAt, before), sql`${notices.deliveryStatus} <> 'pending'`))
    .limit(batch);
  return db.delete(notices).where(sql`${notices.id} IN ${old}`).run().changes;
}

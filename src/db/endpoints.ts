import { and, asc, desc, eq, gte, inArray, isNotNull, isNull, lt, lte, notInArray, or, sql } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import { clients, endpointHealth, notices } from "./sqlite/schema.js";

import type { EndpointHealthRow, NewNoticeRow, NoticeRow } from "../store/rows.js";
import { pickWithinRoom, type ClientRoom } from "../store/fairness.js";

export type { EndpointHealthRow, NewNoticeRow, NoticeRow };

interface Key {
  clientId: string;
  host: string;
}

const ofKey = (k: Key) => and(eq(endpointHealth.clientId, k.clientId), eq(endpointHealth.host, k.host));

/** A failed attempt: the key's failing run starts now unless one is open; the attempt is counted. */
export function recordEndpointFailure(db: Db, key: Key, now: number, error: string | null): void {
  db.insert(endpointHealth)
    .values({
      clientId: key.clientId,
      host: key.host,
      failingSince: now,
      failedAttempts: 1,
      lastError: error,
      updatedAt: now,
    })
    .onConflictDoUpdate({
      target: [endpointHealth.clientId, endpointHealth.host],
      set: {
        failingSince: sql`coalesce(${endpointHealth.failingSince}, ${now})`,
        failedAttempts: sql`${endpointHealth.failedAttempts} + 1`,
        lastError: error,
        updatedAt: now,
      },
    })
    .run();
}

/** A 2xx: ends the key's failing run, returning it (null when none was open). */
export function recordEndpointSuccess(
  db: Db,
  key: Key,
  now: number,
): { failingSince: number; noticeSentAt: number | null } | null {
  return db.transaction((tx) => {
    const open = tx
      .select({ failingSince: endpointHealth.failingSince, noticeSentAt: endpointHealth.noticeSentAt })
      .from(endpointHealth)
      .where(and(ofKey(key), isNotNull(endpointHealth.failingSince)))
      .all()[0];
    if (!open) return null;
    tx.update(endpointHealth)
      .set({ failingSince: null, failedAttempts: 0, noticeSentAt: null, lastSuccessAt: now, updatedAt: now })
      .where(ofKey(key))
      .run();
    return { failingSince: open.failingSince!, noticeSentAt: open.noticeSentAt };
  });
}

/** Only keys of clients with a notification_url: the others have no one to tell (and are never marked). */
export function endpointsDueForNotice(db: Db, before: number, limit: number): EndpointHealthRow[] {
  return db
    .select({ row: endpointHealth })
    .from(endpointHealth)
    .innerJoin(clients, eq(clients.id, endpointHealth.clientId))
    .where(
      and(
        lte(endpointHealth.failingSince, before),
        isNull(endpointHealth.noticeSentAt),
        isNotNull(clients.notificationUrl),
        isNull(clients.revokedAt),
      ),
    )
    .orderBy(asc(endpointHealth.failingSince))
    .limit(limit)
    .all()
    .map((r) => r.row);
}

export function markEndpointNoticed(db: Db, key: Key, failingSince: number, at: number): boolean {
  return (
    db
      .update(endpointHealth)
      .set({ noticeSentAt: at })
      .where(and(ofKey(key), eq(endpointHealth.failingSince, failingSince), isNull(endpointHealth.noticeSentAt)))
      .run().changes > 0
  );
}

export function failingEndpointsOf(db: Db, clientId: string): EndpointHealthRow[] {
  return db
    .select()
    .from(endpointHealth)
    .where(and(eq(endpointHealth.clientId, clientId), isNotNull(endpointHealth.failingSince)))
    .orderBy(asc(endpointHealth.failingSince))
    .all();
}

export function insertNotice(db: Db, row: NewNoticeRow): void {
  db.insert(notices).values(row).run();
}

const claimableNotice = (now: number) =>
  and(
    eq(notices.deliveryStatus, "pending"),
    lte(notices.nextAttemptAt, now),
    or(isNull(notices.claimedUntil), lt(notices.claimedUntil, now)),
  );

/** How far past `limit` a claim looks for other clients' notices when the first ones are over their client's room. */
const NOTICE_SCAN_FACTOR = 4;

/**
 * Claims due notices under a lease, oldest first. With `clientRoom` (the notifier's fair pool), a
 * window of the oldest due notices of clients not left out is picked from in turns, each client
 * within its room (pickWithinRoom, as event claims do), so one client's backlog of notices does not
 * fill the claim ahead of another's.
 */
export function claimDueNotices(
  db: Db,
  opts: {
    now: number;
    leaseMs: number;
    token: string;
    limit: number;
    excludeClients?: string[] | undefined;
    clientRoom?: ClientRoom | undefined;
  },
): NoticeRow[] {
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
  return db
    .update(notices)
    .set(lease)
    .where(and(inArray(notices.id, picked), claimableNotice(opts.now)))
    .returning()
    .all()
    .sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || (a.id < b.id ? -1 : 1));
}

export function recordNotice(db: Db, id: string, token: string, patch: Partial<NewNoticeRow>): void {
  db.update(notices)
    .set({ ...patch, claimedUntil: null, claimToken: null })
    .where(and(eq(notices.id, id), eq(notices.claimToken, token)))
    .run();
}

/**
 * When a pending notice can next be claimed: the earliest unleased one's time, or a lease's end
 * when sooner. Leased notices (one client's, hanging) never hide another's that is due before.
 */
export function nextNoticeDueAt(db: Db, now: number): number | null {
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

export function noticesOfClient(db: Db, clientId: string, limit: number): NoticeRow[] {
  return db
    .select()
    .from(notices)
    .where(eq(notices.clientId, clientId))
    .orderBy(desc(notices.createdAt), desc(notices.id))
    .limit(limit)
    .all();
}

export function pruneNotices(db: Db, before: number, batch: number): number {
  const old = db
    .select({ id: notices.id })
    .from(notices)
    .where(and(lt(notices.createdAt, before), sql`${notices.deliveryStatus} <> 'pending'`))
    .limit(batch);
  return db.delete(notices).where(sql`${notices.id} IN ${old}`).run().changes;
}

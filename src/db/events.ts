import { and, asc, desc, eq, gt, gte, inArray, isNull, lt, lte, notInArray, or, sql, type SQL } from "drizzle-orm";
import { destinationHost, hostUrlPrefixes } from "../webhooks/destination.js";
import type { Db } from "./open.js";
import type { DbOrTx } from "./tx.js";
import { clients, deliveryAttempts, events } from "./schema.js";

export type EventRow = typeof events.$inferSelect;
export type NewEventRow = typeof events.$inferInsert;
export type AttemptRow = typeof deliveryAttempts.$inferSelect;
export type NewAttemptRow = typeof deliveryAttempts.$inferInsert;

export function insertEvent(db: DbOrTx, row: NewEventRow): EventRow {
  return db.insert(events).values(row).returning().all()[0]!;
}

/** Takes the client's next pull-feed position (inside the transaction that writes the event). */
export function nextClientEventSeq(db: DbOrTx, clientId: string): number {
  const row = db
    .update(clients)
    .set({ eventSeq: sql`${clients.eventSeq} + 1` })
    .where(eq(clients.id, clientId))
    .returning({ seq: clients.eventSeq })
    .all()[0];
  if (!row) throw new Error(`no client ${clientId}`);
  return row.seq;
}

export function findEvent(db: DbOrTx, id: string): EventRow | undefined {
  return db.select().from(events).where(eq(events.id, id)).get();
}

export function lastEventOfTask(db: DbOrTx, taskId: string): EventRow | undefined {
  return db.select().from(events).where(eq(events.taskId, taskId)).orderBy(desc(events.sequence)).limit(1).get();
}

/** The newest event of each task, for the delivery summary on task reads. */
export function lastEventsOfTasks(db: DbOrTx, taskIds: string[]): Map<string, EventRow> {
  const map = new Map<string, EventRow>();
  if (taskIds.length === 0) return map;
  const rows = db
    .select()
    .from(events)
    .where(
      and(
        inArray(events.taskId, taskIds),
        sql`${events.sequence} = (SELECT max(e2.sequence) FROM events e2 WHERE e2.task_id = ${events.taskId})`,
      ),
    )
    .all();
  for (const row of rows) map.set(row.taskId, row);
  return map;
}

/**
 * `scheme://authority/` of the stored callback URL, in SQL, to compare with hostUrlPrefixes(): the
 * text up to the first `/` after `//`. Intake stores URLs normalised (`URL.href`), so this is exact.
 */
const callbackOrigin = sql`substr(coalesce(${events.callbackUrl}, ''), 1, instr(coalesce(${events.callbackUrl}, ''), '//') + 1 + instr(substr(coalesce(${events.callbackUrl}, ''), instr(coalesce(${events.callbackUrl}, ''), '//') + 2), '/'))`;

function atHosts(hosts: string[]): SQL | undefined {
  const prefixes = hosts.flatMap(hostUrlPrefixes);
  return prefixes.length === 0 ? undefined : inArray(callbackOrigin, prefixes);
}

function notAtHosts(hosts: string[] | undefined): SQL | undefined {
  const prefixes = (hosts ?? []).flatMap(hostUrlPrefixes);
  return prefixes.length === 0 ? undefined : notInArray(callbackOrigin, prefixes);
}

/** Pending, due, not leased, and no earlier event of its task still pending (which keeps each task's events in order). */
function claimable(now: number): SQL {
  return and(
    eq(events.deliveryStatus, "pending"),
    lte(events.nextAttemptAt, now),
    or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
    sql`NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = ${events.taskId} AND e2.sequence < ${events.sequence} AND e2.delivery_status = 'pending')`,
  )!;
}

export interface ClaimOptions {
  now: number;
  leaseMs: number;
  token: string;
  limit: number;
  /** Destination hosts (`hostname:port`, see destinationHost) whose events are left alone: saturated or circuit open. */
  excludeHosts?: string[];
  /**
   * At most this many events per destination host in this claim (the rest of the host's cap).
   * Without it one host's backlog could fill the whole claim, only to be released again.
   */
  hostRoom?: (host: string) => number;
}

/** How far past `limit` to look for events of other hosts when the first ones are over their host's room. */
const SCAN_FACTOR = 4;

/**
 * Claims pending events that are due under a lease, oldest due first. An event waits while an
 * earlier event of the same task is still pending, which keeps each task's events in order.
 */
export function claimDueEvents(db: Db, opts: ClaimOptions): EventRow[] {
  if (opts.limit <= 0) return [];
  const where = and(claimable(opts.now), notAtHosts(opts.excludeHosts));
  const lease = { claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token };
  if (!opts.hostRoom) {
    const due = db.select({ seq: events.seq }).from(events).where(where).orderBy(asc(events.nextAttemptAt), asc(events.seq)).limit(opts.limit);
    return db.update(events).set(lease).where(inArray(events.seq, due)).returning().all();
  }
  // Pick per host in code, then claim with the conditions checked again in the UPDATE: another
  // process may have claimed a candidate in between, and it then simply is not returned.
  const candidates = db
    .select({ seq: events.seq, callbackUrl: events.callbackUrl })
    .from(events)
    .where(where)
    .orderBy(asc(events.nextAttemptAt), asc(events.seq))
    .limit(opts.limit * SCAN_FACTOR)
    .all();
  const taken = new Map<string, number>();
  const picked: number[] = [];
  for (const c of candidates) {
    const host = destinationHost(c.callbackUrl ?? "");
    const count = taken.get(host) ?? 0;
    if (count >= opts.hostRoom(host)) continue;
    taken.set(host, count + 1);
    picked.push(c.seq);
    if (picked.length >= opts.limit) break;
  }
  if (picked.length === 0) return [];
  return db
    .update(events)
    .set(lease)
    .where(and(inArray(events.seq, picked), claimable(opts.now)))
    .returning()
    .all()
    .sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
}

/**
 * When the next unleased pending event is due, leaving out the given destination hosts. Walks the
 * (delivery_status, next_attempt_at) index and looks at most `scan` rows deep, so a backlog queued
 * behind a saturated host costs the same as none: past the scan it answers "recheck in a second"
 * (leased events and saturated hosts wake the loop themselves when an attempt settles).
 */
export function nextEventDueAt(db: Db, opts: { now: number; excludeHosts?: string[]; scan?: number }): number | null {
  const rows = db
    .select({ at: events.nextAttemptAt, url: events.callbackUrl })
    .from(events)
    .where(and(eq(events.deliveryStatus, "pending"), or(isNull(events.claimedUntil), lt(events.claimedUntil, opts.now))))
    .orderBy(asc(events.nextAttemptAt))
    .limit(opts.scan ?? 200)
    .all();
  if (rows.length === 0) return null;
  const excluded = new Set(opts.excludeHosts ?? []);
  for (const row of rows) if (!excluded.has(destinationHost(row.url ?? ""))) return row.at;
  return rows.length < (opts.scan ?? 200) ? null : opts.now + 1_000;
}

/**
 * Moves a host's due, unleased pending events to `until` (the end of its circuit's cool-down):
 * no attempt is recorded and the retry schedule is not advanced. Returns how many moved.
 */
export function postponeHostEvents(db: Db, host: string, until: number, now: number): number {
  const at = atHosts([host]);
  if (!at) return 0;
  return db
    .update(events)
    .set({ nextAttemptAt: until })
    .where(
      and(
        eq(events.deliveryStatus, "pending"),
        lt(events.nextAttemptAt, until),
        or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
        at,
      ),
    )
    .run().changes;
}

export function updateLeasedEvent(db: DbOrTx, id: string, token: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db
    .update(events)
    .set(patch)
    .where(and(eq(events.id, id), eq(events.claimToken, token)))
    .returning()
    .all()[0];
}

export function updateEvent(db: DbOrTx, id: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db.update(events).set(patch).where(eq(events.id, id)).returning().all()[0];
}

export function insertAttempt(db: DbOrTx, row: NewAttemptRow): AttemptRow {
  return db.insert(deliveryAttempts).values(row).returning().all()[0]!;
}

export function listTaskAttempts(db: DbOrTx, taskId: string): AttemptRow[] {
  return db
    .select()
    .from(deliveryAttempts)
    .where(eq(deliveryAttempts.taskId, taskId))
    .orderBy(asc(deliveryAttempts.attemptedAt), asc(deliveryAttempts.id))
    .all();
}

/** The pull feed: a client's events after a feed position, in order. */
export function listClientEvents(db: DbOrTx, clientId: string, afterSeq: number, limit: number): EventRow[] {
  return db
    .select()
    .from(events)
    .where(and(eq(events.clientId, clientId), gt(events.seq, afterSeq)))
    .orderBy(asc(events.seq))
    .limit(limit)
    .all();
}

/** Re-queues a client's failed deliveries created since a time; returns how many. */
export function requeueFailedEvents(db: DbOrTx, clientId: string, since: number, now: number): number {
  return db
    .update(events)
    .set({ deliveryStatus: "pending", roundAttempts: 0, nextAttemptAt: now, failedAt: null, claimedUntil: null, claimToken: null })
    .where(and(eq(events.clientId, clientId), eq(events.deliveryStatus, "failed"), gte(events.createdAt, since)))
    .run().changes;
}

export function releaseEventLeases(db: Db, ownerPrefix: string): number {
  return db
    .update(events)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${events.claimToken} LIKE ${ownerPrefix + ":%"}`)
    .run().changes;
}

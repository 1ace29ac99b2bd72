import {
  and,
  asc,
  desc,
  eq,
  gt,
  gte,
  inArray,
  isNull,
  lt,
  lte,
  notInArray,
  or,
  sql,
  type Placeholder,
  type SQL,
} from "drizzle-orm";
import { pickWithinRoom, type ClientRoom } from "../store/fairness.js";
import { deliveryKey } from "../store/delivery-key.js";
import type { Db } from "./sqlite/open.js";
import { insertEveryColumn, jsonList, patchShape, prepared } from "./sqlite/prepared.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { clients, deliveryAttempts, events } from "./sqlite/schema.js";

import type { AttemptRow, EventRow, NewAttemptRow, NewEventRow } from "../store/rows.js";

export type { AttemptRow, EventRow, NewAttemptRow, NewEventRow };

export function insertEvent(db: DbOrTx, row: NewEventRow): EventRow {
  return db.insert(events).values(row).returning().all()[0]!;
}

/** Writes an outbox event (every column bound, on a statement prepared once), with the client's next feed position. */
export function insertEventPrepared(db: Db, row: Omit<NewEventRow, "clientSeq">): void {
  const clientSeq = prepared(db, "clients.nextEventSeq", () =>
    db
      .update(clients)
      .set({ eventSeq: sql`${clients.eventSeq} + 1` })
      .where(eq(clients.id, sql.placeholder("clientId")))
      .returning({ seq: clients.eventSeq })
      .prepare(),
  ).all({ clientId: row.clientId })[0];
  if (!clientSeq) throw new Error(`no client ${row.clientId}`);
  insertEveryColumn(db, events, { ...row, clientSeq: clientSeq.seq }, ["seq"]);
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
 * Deliveries are isolated per delivery key: a client and a destination host (`client_id|host`),
 * so one client's failing or slow receiver never holds back another's, even on the same host.
 */
const deliveryKeySql = sql`(${events.clientId} || '|' || ${events.destinationHost})`;

function notAtKeys(keys: string[] | undefined): SQL | undefined {
  return keys && keys.length > 0 ? notInArray(deliveryKeySql, keys) : undefined;
}

/** Pending, due, not leased, and no earlier event of its task still pending (which keeps each task's events in order). */
function claimable(now: number | Placeholder, byRowid = false): SQL {
  // byRowid: the unary + keeps SQLite from walking the due index for these terms when the rows are
  // named by seq (it would scan every pending event to find a handful).
  const plus = byRowid ? sql.raw("+") : sql.empty();
  return and(
    sql`${plus}${events.deliveryStatus} = 'pending'`,
    sql`${plus}${events.nextAttemptAt} <= ${now}`,
    or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
    sql`NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = ${events.taskId} AND e2.sequence < ${events.sequence} AND e2.delivery_status = 'pending')`,
  )!;
}

function notOfClients(ids: string[] | undefined): SQL | undefined {
  return ids && ids.length > 0 ? notInArray(events.clientId, ids) : undefined;
}

export interface ClaimOptions {
  now: number;
  leaseMs: number;
  token: string;
  limit: number;
  /**
   * Delivery keys (`client_id|host`) whose events are left alone: at their cap or with a breaker
   * trial out. Each holds an attempt in flight, so the list is never longer than the in-flight cap.
   */
  excludeKeys?: string[];
  /**
   * At most this many events per delivery key in this claim (the rest of its cap).
   * Without it one key's backlog could fill the whole claim, only to be released again.
   */
  keyRoom?: (key: string) => number;
  excludeClients?: string[];
  clientRoom?: ClientRoom;
}

/** How far past `limit` to look for events of other hosts when the first ones are over their host's room. */
const SCAN_FACTOR = 4;

/**
 * Claims pending events that are due under a lease, oldest due first. An event waits while an
 * earlier event of the same task is still pending, which keeps each task's events in order.
 */
export function claimDueEvents(db: Db, opts: ClaimOptions): EventRow[] {
  if (opts.limit <= 0) return [];
  if (!opts.keyRoom) {
    const where = and(claimable(opts.now), notAtKeys(opts.excludeKeys), notOfClients(opts.excludeClients));
    const lease = { claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token };
    const due = db
      .select({ seq: events.seq })
      .from(events)
      .where(where)
      .orderBy(asc(events.nextAttemptAt), asc(events.seq))
      .limit(opts.limit);
    return db.update(events).set(lease).where(inArray(events.seq, due)).returning().all();
  }
  // Pick per host in code, then claim with the conditions checked again in the UPDATE: another
  // process may have claimed a candidate in between, and it then simply is not returned.
  const candidates = prepared(db, "events.claimCandidates", () =>
    db
      .select({ seq: events.seq, clientId: events.clientId, host: events.destinationHost })
      .from(events)
      .where(
        and(
          claimable(sql.placeholder("now")),
          sql`${deliveryKeySql} NOT IN (SELECT value FROM json_each(${sql.placeholder("keys")}))`,
          sql`${events.clientId} NOT IN (SELECT value FROM json_each(${sql.placeholder("clients")}))`,
        ),
      )
      .orderBy(asc(events.nextAttemptAt), asc(events.seq))
      .limit(sql.placeholder("limit"))
      .prepare(),
  ).all({
    now: opts.now,
    keys: jsonList(opts.excludeKeys ?? []),
    clients: jsonList(opts.excludeClients ?? []),
    limit: opts.limit * SCAN_FACTOR,
  });
  const picked = pickWithinRoom(candidates, opts.limit, opts.keyRoom, opts.clientRoom).map((c) => c.seq);
  if (picked.length === 0) return [];
  return leaseEvents(db, picked, opts).sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
}

/** How many of a key's pending events are leased now (the per-key cap's count), through events_key_due_idx. */
export function leasedOfKey(db: Db, key: { clientId: string; host: string }, now: number): number {
  return (
    prepared(db, "events.leasedOfKey", () =>
      db
        .select({ n: sql<number>`count(*)` })
        .from(events)
        .where(
          and(
            eq(events.clientId, sql.placeholder("clientId")),
            eq(events.destinationHost, sql.placeholder("host")),
            eq(events.deliveryStatus, "pending"),
            gte(events.claimedUntil, sql.placeholder("now")),
          ),
        )
        .prepare(),
    ).get({ clientId: key.clientId, host: key.host, now })?.n ?? 0
  );
}

/** Leases the given events where they are still claimable (another claim may have taken one since it was picked). */
function leaseEvents(db: Db, seqs: number[], opts: { now: number; leaseMs: number; token: string }): EventRow[] {
  return prepared(db, "events.lease", () =>
    db
      .update(events)
      .set({
        claimedUntil: sql.placeholder("until"),
        claimToken: sql.placeholder("token"),
      } as unknown as Partial<NewEventRow>)
      .where(
        and(
          sql`${events.seq} IN (SELECT value FROM json_each(${sql.placeholder("seqs")}))`,
          claimable(sql.placeholder("now"), true),
        ),
      )
      .returning()
      .prepare(),
  ).all({ seqs: jsonList(seqs), now: opts.now, until: opts.now + opts.leaseMs, token: opts.token });
}

/**
 * When the next unleased pending event is due, leaving out the given destination hosts. Walks the
 * (delivery_status, next_attempt_at) index and looks at most `scan` rows deep, so a backlog queued
 * behind a saturated host costs the same as none: past the scan it answers "recheck in a second"
 * (leased events and saturated hosts wake the loop themselves when an attempt settles).
 */
export function nextEventDueAt(
  db: Db,
  opts: { now: number; excludeKeys?: string[]; excludeClients?: string[]; scan?: number },
): number | null {
  const rows = prepared(db, "events.nextDue", () =>
    db
      .select({ at: events.nextAttemptAt, clientId: events.clientId, host: events.destinationHost })
      .from(events)
      .where(
        and(
          eq(events.deliveryStatus, "pending"),
          or(isNull(events.claimedUntil), lt(events.claimedUntil, sql.placeholder("now"))),
        ),
      )
      .orderBy(asc(events.nextAttemptAt))
      .limit(sql.placeholder("scan"))
      .prepare(),
  ).all({ now: opts.now, scan: opts.scan ?? 200 });
  if (rows.length === 0) return null;
  const excluded = new Set(opts.excludeKeys ?? []);
  const clientsOut = new Set(opts.excludeClients ?? []);
  for (const row of rows)
    if (!excluded.has(deliveryKey(row.clientId, row.host)) && !clientsOut.has(row.clientId)) return row.at;
  return rows.length < (opts.scan ?? 200) ? null : opts.now + 1_000;
}

/**
 * Moves a delivery key's due, unleased pending events to `until` (the end of its circuit's
 * cool-down): no attempt is recorded and the retry schedule is not advanced. One indexed update
 * per opening, so the claim query never has to know which circuits are open. Returns how many moved.
 */
export function postponeKeyEvents(db: Db, clientId: string, host: string, until: number, now: number): number {
  return db
    .update(events)
    .set({ nextAttemptAt: until })
    .where(
      and(
        eq(events.clientId, clientId),
        eq(events.destinationHost, host),
        eq(events.deliveryStatus, "pending"),
        lt(events.nextAttemptAt, until),
        or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
      ),
    )
    .run().changes;
}

/** Events stored before destination_host existed: filled in once at start (the caller parses the URLs). */
export function eventsWithoutDestination(db: Db): string[] {
  return db
    .selectDistinct({ url: events.callbackUrl })
    .from(events)
    .where(and(eq(events.destinationHost, ""), sql`${events.callbackUrl} IS NOT NULL`))
    .all()
    .map((r) => r.url!);
}

export function setDestination(db: Db, url: string, host: string): void {
  db.update(events)
    .set({ destinationHost: host })
    .where(and(eq(events.callbackUrl, url), eq(events.destinationHost, "")))
    .run();
}

/**
 * Writes a patch to an event while the caller's lease holds; true when it did. `db` is the database
 * (its statements, one per shape of patch, are prepared once), also inside its open transaction.
 */
export function updateLeasedEvent(db: Db, id: string, token: string, patch: Partial<NewEventRow>): boolean {
  const shape = patchShape(patch);
  const statement = prepared(db, `events.updateLeased:${shape.join(",")}`, () =>
    db
      .update(events)
      .set(Object.fromEntries(shape.map((k) => [k, sql.placeholder(k)])) as Partial<NewEventRow>)
      .where(and(eq(events.id, sql.placeholder("__id")), eq(events.claimToken, sql.placeholder("__token"))))
      .prepare(),
  );
  return statement.run({ ...patch, __id: id, __token: token }).changes > 0;
}

export function updateEvent(db: DbOrTx, id: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db.update(events).set(patch).where(eq(events.id, id)).returning().all()[0];
}

/** Records an attempt (prepared once; every column bound, absent ones as NULL). */
export function insertAttempt(db: Db, row: NewAttemptRow): void {
  insertEveryColumn(db, deliveryAttempts, row);
}

export function listTaskAttempts(db: DbOrTx, taskId: string): AttemptRow[] {
  return db
    .select()
    .from(deliveryAttempts)
    .where(eq(deliveryAttempts.taskId, taskId))
    .orderBy(asc(deliveryAttempts.attemptedAt), asc(deliveryAttempts.id))
    .all();
}

/** The pull feed: a client's events after a position in its own feed, in order. */
export function listClientEvents(db: DbOrTx, clientId: string, afterPos: number, limit: number): EventRow[] {
  return db
    .select()
    .from(events)
    .where(and(eq(events.clientId, clientId), gt(events.clientSeq, afterPos)))
    .orderBy(asc(events.clientSeq))
    .limit(limit)
    .all();
}

/** The client's feed position of its last event at or before a relay-wide seq (old cursors). */
export function clientSeqAtOrBefore(db: DbOrTx, clientId: string, seq: number): number {
  const row = db
    .select({ pos: sql<number>`coalesce(max(${events.clientSeq}), 0)` })
    .from(events)
    .where(and(eq(events.clientId, clientId), lte(events.seq, seq)))
    .get();
  return row?.pos ?? 0;
}

/** Re-queues a client's failed deliveries created since a time with the core's new-round patch; returns how many. */
export function requeueFailedEvents(db: DbOrTx, clientId: string, since: number, round: Partial<NewEventRow>): number {
  return db
    .update(events)
    .set(round)
    .where(and(eq(events.clientId, clientId), eq(events.deliveryStatus, "failed"), gte(events.createdAt, since)))
    .run().changes;
}

/** Releases every event lease (start of a single-process relay: any lease left is a dead process's). */
export function releaseAllEventLeases(db: Db): number {
  return db
    .update(events)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${events.claimToken} IS NOT NULL`)
    .run().changes;
}

/**
 * The half-open trial of a paused key: one claimable event of the key, an already attempted one
 * first (a receiver that fails every first attempt and takes the retry gets a trial it can pass).
 */
export function claimTrialEvent(
  db: Db,
  key: { clientId: string; host: string },
  opts: { now: number; leaseMs: number; token: string },
): EventRow | undefined {
  return claimKeyEvents(db, key, { ...opts, limit: 1, attemptedFirst: true })[0];
}

/**
 * Up to `limit` of one delivery key's claimable events under a lease, through events_key_due_idx:
 * oldest due first, or (a breaker trial) an already attempted one first.
 */
export function claimKeyEvents(
  db: Db,
  key: { clientId: string; host: string },
  opts: { now: number; leaseMs: number; token: string; limit: number; attemptedFirst?: boolean },
): EventRow[] {
  if (opts.limit <= 0) return [];
  const order = opts.attemptedFirst
    ? [sql`(${events.attempts} = 0)`, asc(events.nextAttemptAt), asc(events.seq)]
    : [asc(events.nextAttemptAt), asc(events.seq)];
  const picks = prepared(db, `events.keyPicks:${opts.attemptedFirst ? "attempted" : "due"}`, () =>
    db
      .select({ seq: events.seq })
      .from(events)
      .where(
        and(
          claimable(sql.placeholder("now")),
          eq(events.clientId, sql.placeholder("clientId")),
          eq(events.destinationHost, sql.placeholder("host")),
        ),
      )
      .orderBy(...order)
      .limit(sql.placeholder("limit"))
      .prepare(),
  ).all({ now: opts.now, clientId: key.clientId, host: key.host, limit: opts.limit });
  if (picks.length === 0) return [];
  return leaseEvents(
    db,
    picks.map((p) => p.seq),
    opts,
  ).sort(
    (a, b) =>
      (opts.attemptedFirst ? Number(a.attempts === 0) - Number(b.attempts === 0) : 0) ||
      (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) ||
      a.seq - b.seq,
  );
}

/** Retry-now: the key's pending, unleased events due at once (a paused key's included). */
export function retryKeyEventsNow(db: Db, key: { clientId: string; host: string }, now: number): number {
  return db
    .update(events)
    .set({ nextAttemptAt: now })
    .where(
      and(
        eq(events.clientId, key.clientId),
        eq(events.destinationHost, key.host),
        eq(events.deliveryStatus, "pending"),
        or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
      ),
    )
    .run().changes;
}

export function pendingEventsOfKey(db: Db, key: { clientId: string; host: string }): number {
  return (
    db
      .select({ n: sql<number>`count(*)` })
      .from(events)
      .where(
        and(
          eq(events.clientId, key.clientId),
          eq(events.destinationHost, key.host),
          eq(events.deliveryStatus, "pending"),
        ),
      )
      .all()[0]?.n ?? 0
  );
}

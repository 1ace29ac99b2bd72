import { and, asc, eq, gte, inArray, isNull, lt, notInArray, or, sql, type Placeholder, type SQL } from "drizzle-orm";
import type { ClaimOptions, DeliveryKey, EventClaimOptions, KeyLimit } from "../../store/store.js";
import type { ClaimedEvent, NewEventRow } from "../../store/rows.js";
import { pickWithinRoom } from "../../store/fairness.js";
import type { Db } from "./open.js";
import { jsonList, prepared, statement } from "./prepared.js";
import { events } from "./schema.js";
import { eventsInDueOrder } from "../kit/claim-order.js";
import { EVENT_SCAN_FACTOR } from "../kit/claim-window.js";
import { leaseRoom } from "../../store/lease-ahead.js";

/**
 * The EventStore's claims on SQLite: claimDue, claimOfKey(s) and claimTrial, and the leases they take.
 * Each is one UPDATE after its reads (sqliteEvents in events.ts runs them in the attempts' group commit).
 */

/**
 * Deliveries are isolated per delivery key: a client and a destination host (`client_id|host`),
 * so one client's failing or slow receiver never holds back another's, even on the same host.
 */
const deliveryKeySql = sql`(${events.clientId} || '|' || ${events.destinationHost})`;

function notAtKeys(keys: string[] | undefined): SQL | undefined {
  return keys && keys.length > 0 ? notInArray(deliveryKeySql, keys) : undefined;
}

/** Pending, due, not leased, and no earlier event of its task to the same destination still pending (each destination gets a task's events in order). */
function claimable(now: number | Placeholder, byRowid = false): SQL {
  // byRowid: the unary + keeps SQLite from walking the due index for these terms when the rows are
  // named by seq (it would scan every pending event to find a handful).
  const plus = byRowid ? sql.raw("+") : sql.empty();
  return and(
    sql`${plus}${events.deliveryStatus} = 'pending'`,
    sql`${plus}${events.nextAttemptAt} <= ${now}`,
    or(isNull(events.claimedUntil), lt(events.claimedUntil, now)),
    sql`NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = ${events.taskId} AND e2.sequence < ${events.sequence} AND e2.endpoint_id IS ${events.endpointId} AND e2.delivery_status = 'pending')`,
  )!;
}

function notOfClients(ids: string[] | undefined): SQL | undefined {
  return ids && ids.length > 0 ? notInArray(events.clientId, ids) : undefined;
}

/**
 * Claims pending events that are due under a lease, oldest due first. An event waits while an
 * earlier event of the same task is still pending, which keeps each task's events in order.
 * Without `keyRoom` (tests, the CLI) one UPDATE takes the oldest due.
 */
export function claimDue(
  db: Db,
  opts: ClaimOptions & Partial<Omit<EventClaimOptions, keyof ClaimOptions>> & { scan?: number },
): ClaimedEvent[] {
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
    return db.update(events).set(lease).where(inArray(events.seq, due)).returning(CLAIMED).all();
  }
  // Pick per host in code, then claim with the conditions checked again in the UPDATE: another
  // process may have claimed a candidate in between, and it then simply is not returned.
  const wanted = opts.limit * EVENT_SCAN_FACTOR;
  const scan = opts.scan ?? wanted;
  const perKey = Math.min(opts.limit, opts.maxPerKey ?? opts.limit);
  const excluded = { keys: jsonList(opts.excludeKeys ?? []), clients: jsonList(opts.excludeClients ?? []) };
  let candidates = statement(db, "events.claimCandidates", CANDIDATES_SQL).all({
    ...excluded,
    now: opts.now,
    scan,
    limit: wanted,
  }) as Candidate[];
  // The first `scan` due events hold fewer than the claim may take, even with every key's cap (a
  // capped key's backlog, due earlier, fills them), and more are due: each other key's own first
  // events instead, so the claim never walks that backlog. Decided on the rows alone: the rooms are
  // asked once, by the one pick (asking a client's room is not a pure read: core/fair-pool.ts).
  if (
    withinCaps(candidates, perKey) < opts.limit &&
    statement(db, "events.dueBeyond", DUE_BEYOND_SQL).get({ now: opts.now, scan })
  )
    candidates = byKey(db, opts.now, excluded, perKey, wanted);
  const picked = pickWithinRoom(candidates, opts.limit, opts.keyRoom, opts.clientRoom).map((c) => c.seq);
  if (picked.length === 0) return [];
  return eventsInDueOrder(lease(db, picked, opts));
}

/** How many of the candidates a claim could take with no key past `perKey`. */
function withinCaps(candidates: readonly Candidate[], perKey: number): number {
  const byKey = new Map<string, number>();
  let n = 0;
  for (const c of candidates) {
    const key = `${c.clientId}|${c.host}`;
    const k = byKey.get(key) ?? 0;
    if (k < perKey) n += 1;
    byKey.set(key, k + 1);
  }
  return n;
}

/** A due event the loop's claim may pick, and its key. */
interface Candidate {
  seq: number;
  clientId: string;
  host: string;
}

/**
 * The candidates key by key: the keys of the events table one index seek each (events_key_due_idx,
 * a loose scan) less the excluded ones, each its first `perKey` claimable events in due order (more
 * of one key no claim picks: the per-key cap), and the first `limit` of them all in due order: what
 * walking the due index to the end finds, at the cost of the table's keys, not of its backlog.
 */
function byKey(
  db: Db,
  now: number,
  excluded: { keys: string; clients: string },
  perKey: number,
  limit: number,
): Candidate[] {
  type Due = Candidate & { at: number };
  const keys = statement(db, "events.claimKeys", KEYS_SQL).all({ ...excluded, now }) as Array<{ c: string; h: string }>;
  const ofKey = statement(db, "events.claimCandidatesOfKey", CANDIDATES_OF_KEY_SQL);
  const all: Due[] = [];
  for (const { c, h } of keys) all.push(...(ofKey.all({ c, h, now, perKey }) as Due[]));
  return all.sort((a, b) => a.at - b.at || a.seq - b.seq).slice(0, limit);
}

/**
 * The earliest due time of an unleased pending event of any key but the excluded ones (and not of
 * an excluded client), key by key: the keys with pending events (KEYS_SQL), each its first unleased
 * one through events_key_due_idx. Null when there is none.
 */
export function firstDueOfKeys(db: Db, now: number, excludeKeys: string[], excludeClients: string[]): number | null {
  // Every pending event is due by the end of time: KEYS_SQL's "has due events" becomes "has pending".
  const keys = statement(db, "events.claimKeys", KEYS_SQL).all({
    keys: jsonList(excludeKeys),
    clients: jsonList(excludeClients),
    now: Number.MAX_SAFE_INTEGER,
  }) as Array<{ c: string; h: string }>;
  const firstOf = statement(db, "events.firstUnleasedOfKey", FIRST_UNLEASED_OF_KEY_SQL);
  let first: number | null = null;
  for (const { c, h } of keys) {
    const at = (firstOf.get({ c, h, now }) as { at: number } | undefined)?.at;
    if (at !== undefined && at !== null && (first === null || at < first)) first = at;
  }
  return first;
}

/** claimable() on `e`, for this file's own SQL: not leased, and each task's events to an endpoint in order. */
const CLAIMABLE_E = `(e.claimed_until IS NULL OR e.claimed_until < @now)
  AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = e.task_id AND e2.sequence < e.sequence
                  AND e2.endpoint_id IS e.endpoint_id AND e2.delivery_status = 'pending')`;

/** Not at an excluded key nor of an excluded client (each list one JSON parameter). */
const NOT_EXCLUDED = (client: string, host: string) =>
  `(${client} || '|' || ${host}) NOT IN (SELECT value FROM json_each(@keys))
  AND ${client} NOT IN (SELECT value FROM json_each(@clients))`;

/**
 * The loop's candidates: claimable events in due order among the first `scan` due events only
 * (events_due_idx), so a capped key's backlog due earlier costs at most `scan` rows a claim.
 */
const CANDIDATES_SQL = `SELECT e.seq AS seq, e.client_id AS clientId, e.destination_host AS host
FROM (SELECT seq, client_id, destination_host, next_attempt_at, claimed_until, task_id, sequence, endpoint_id
        FROM events WHERE delivery_status = 'pending' AND next_attempt_at <= @now
       ORDER BY next_attempt_at, seq LIMIT @scan) AS e
WHERE ${NOT_EXCLUDED("e.client_id", "e.destination_host")} AND ${CLAIMABLE_E}
ORDER BY e.next_attempt_at, e.seq LIMIT @limit`;

/** Whether more than `scan` events are due (the candidates' scan stopped before the end). */
const DUE_BEYOND_SQL = `SELECT 1 AS beyond FROM events WHERE delivery_status = 'pending' AND next_attempt_at <= @now
ORDER BY next_attempt_at, seq LIMIT 1 OFFSET @scan`;

/**
 * The keys with due events, not excluded: a loose scan of events_key_due_idx, one seek to the next
 * key (the client's next host, else the next client), one to see whether the key has any due.
 */
const KEYS_SQL = `WITH RECURSIVE k(c, h) AS (
  SELECT * FROM (SELECT client_id, destination_host FROM events INDEXED BY events_key_due_idx
                  ORDER BY client_id, destination_host LIMIT 1)
  UNION ALL
  SELECT n.client_id, n.destination_host FROM k JOIN events n ON n.seq = coalesce(
    (SELECT x.seq FROM events x INDEXED BY events_key_due_idx WHERE x.client_id = k.c AND x.destination_host > k.h
      ORDER BY x.destination_host LIMIT 1),
    (SELECT x.seq FROM events x INDEXED BY events_key_due_idx WHERE x.client_id > k.c
      ORDER BY x.client_id, x.destination_host LIMIT 1))
)
SELECT c, h FROM k WHERE ${NOT_EXCLUDED("c", "h")}
  AND EXISTS (SELECT 1 FROM events d INDEXED BY events_key_due_idx WHERE d.client_id = k.c AND d.destination_host = k.h
              AND d.delivery_status = 'pending' AND d.next_attempt_at <= @now)`;

/** One key's first `perKey` claimable events in due order (events_key_due_idx). */
const CANDIDATES_OF_KEY_SQL = `SELECT e.seq AS seq, e.client_id AS clientId, e.destination_host AS host, e.next_attempt_at AS at
FROM events e INDEXED BY events_key_due_idx
WHERE e.client_id = @c AND e.destination_host = @h AND e.delivery_status = 'pending' AND e.next_attempt_at <= @now
  AND ${CLAIMABLE_E}
ORDER BY e.next_attempt_at, e.seq LIMIT @perKey`;

/** One key's first unleased pending event's due time (events_key_due_idx, past the key's leased ones). */
const FIRST_UNLEASED_OF_KEY_SQL = `SELECT e.next_attempt_at AS at FROM events e INDEXED BY events_key_due_idx
WHERE e.client_id = @c AND e.destination_host = @h AND e.delivery_status = 'pending'
  AND (e.claimed_until IS NULL OR e.claimed_until < @now)
ORDER BY e.next_attempt_at LIMIT 1`;

/**
 * How many of a key's pending events are leased now (the per-key cap's count): a range of
 * events_key_leased_idx, the partial index over leased events only, so it walks the key's leases
 * (what is in flight), never its backlog. The literal `'pending'` is the index's own term: with it
 * bound as a value instead, SQLite could not tell that the index covers the query.
 */
export function leasedOfKey(db: Db, key: DeliveryKey, now: number): number {
  return (
    prepared(db, "events.leasedOfKey", () => leasedOfKeyQuery(db).prepare()).get({
      clientId: key.clientId,
      host: key.host,
      now,
    })?.n ?? 0
  );
}

/**
 * A key's leases now, and how many of them are the claimer's own (a claim that leases ahead:
 * core/delivery-plan.ts, leaseRoom). The token is not in events_key_leased_idx: each leased row
 * is looked up, at most the key's lease-ahead limit of them.
 */
function leasesOfKey(db: Db, key: DeliveryKey, opts: { now: number; token: string }): { leased: number; mine: number } {
  const row = prepared(db, "events.leasesOfKey", () =>
    db
      .select({
        leased: sql<number>`count(*)`,
        mine: sql<number>`coalesce(sum(${events.claimToken} = ${sql.placeholder("token")}), 0)`,
      })
      .from(events)
      .where(leasedOfKeyWhere())
      .prepare(),
  ).get({ clientId: key.clientId, host: key.host, now: opts.now, token: opts.token });
  return { leased: row?.leased ?? 0, mine: row?.mine ?? 0 };
}

/** A key's leased events now: a range of events_key_leased_idx (its literal `'pending'`, see leasedOfKey). */
function leasedOfKeyWhere(): SQL {
  return and(
    eq(events.clientId, sql.placeholder("clientId")),
    eq(events.destinationHost, sql.placeholder("host")),
    sql`${events.deliveryStatus} = 'pending'`,
    gte(events.claimedUntil, sql.placeholder("now")),
  )!;
}

/** leasedOfKey's statement, before it is prepared (test/unit/sqlite-event-claims.test.ts reads its plan). */
export function leasedOfKeyQuery(db: Db) {
  return db.select({ n: sql<number>`count(*)` }).from(events).where(leasedOfKeyWhere());
}

/**
 * What a claim's RETURNING names: the columns of ClaimedEvent only. Building the whole 26-column
 * row cost the refill claim about three times as much as its statement (docs/performance.md).
 */
const CLAIMED = {
  seq: events.seq,
  id: events.id,
  clientId: events.clientId,
  taskId: events.taskId,
  type: events.type,
  payload: events.payload,
  callbackUrl: events.callbackUrl,
  destinationHost: events.destinationHost,
  callbackHeaders: events.callbackHeaders,
  traceparent: events.traceparent,
  tracestate: events.tracestate,
  webhookId: events.webhookId,
  endpointId: events.endpointId,
  attempts: events.attempts,
  roundAttempts: events.roundAttempts,
  nextAttemptAt: events.nextAttemptAt,
  claimedUntil: events.claimedUntil,
  claimToken: events.claimToken,
  createdAt: events.createdAt,
} satisfies Record<keyof ClaimedEvent, unknown>;

/** The lease a claim's UPDATE sets: its end and the claimer's token, bound per call. */
const LEASE = {
  claimedUntil: sql.placeholder("until"),
  claimToken: sql.placeholder("token"),
} as unknown as Partial<NewEventRow>;

/** Leases the given events where they are still claimable (another claim may have taken one since it was picked). */
function lease(db: Db, seqs: number[], opts: { now: number; leaseMs: number; token: string }): ClaimedEvent[] {
  return prepared(db, "events.lease", () =>
    db
      .update(events)
      .set(LEASE)
      .where(
        and(
          sql`${events.seq} IN (SELECT value FROM json_each(${sql.placeholder("seqs")}))`,
          claimable(sql.placeholder("now"), true),
        ),
      )
      .returning(CLAIMED)
      .prepare(),
  ).all({ seqs: jsonList(seqs), now: opts.now, until: opts.now + opts.leaseMs, token: opts.token });
}

/**
 * The half-open trial of a paused key: one claimable event of the key, an already attempted one
 * first (a receiver that fails every first attempt and takes the retry gets a trial it can pass).
 */
export function claimTrial(
  db: Db,
  key: DeliveryKey,
  opts: { now: number; leaseMs: number; token: string },
): ClaimedEvent | undefined {
  return claimOfKey(db, key, { ...opts, limit: 1, attemptedFirst: true })[0];
}

/**
 * Up to `limit` of one delivery key's claimable events under a lease, through events_key_due_idx:
 * oldest due first, or (a breaker trial) an already attempted one first. The caller takes the
 * key's leased events off `limit` (the per-key cap: see leasedOfKey).
 */
export function claimOfKey(
  db: Db,
  key: DeliveryKey,
  opts: { now: number; leaseMs: number; token: string; limit: number; attemptedFirst?: boolean },
): ClaimedEvent[] {
  if (opts.limit <= 0) return [];
  const picks = keyPicks(db, key, opts.now, opts.limit, opts.attemptedFirst === true);
  if (picks.length === 0) return [];
  return lease(db, picks, opts).sort(
    (a, b) =>
      (opts.attemptedFirst ? Number(a.attempts === 0) - Number(b.attempts === 0) : 0) ||
      (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) ||
      a.seq - b.seq,
  );
}

/** The seqs of a key's first `limit` claimable events, in due order (or an attempted one first), through events_key_due_idx. */
function keyPicks(db: Db, key: DeliveryKey, now: number, limit: number, attemptedFirst: boolean): number[] {
  const order = attemptedFirst
    ? [sql`(${events.attempts} = 0)`, asc(events.nextAttemptAt), asc(events.seq)]
    : [asc(events.nextAttemptAt), asc(events.seq)];
  return prepared(db, `events.keyPicks:${attemptedFirst ? "attempted" : "due"}`, () =>
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
  )
    .all({ now, clientId: key.clientId, host: key.host, limit })
    .map((p) => p.seq);
}

/**
 * Several keys' refills under one lease: for each key (client, host, limit), its first claimable
 * events through events_key_due_idx, within its room: its limit, and no more than `maxPerKey` less
 * its leased events (events_key_leased_idx, leasedOfKey); then ONE UPDATE leases them all, the
 * conditions checked again in it. The limits are the caller's plan (core/delivery-plan.ts,
 * refillPlan); this applies them. The reads and the UPDATE run inside the caller's transaction (the
 * attempts' group commit, which takes the write lock up front), so no other process's claim comes
 * in between. Measured (docs/performance.md, seventh round): one statement that numbered each key's
 * candidates with a window function cost about twice the per-key reads and one UPDATE together.
 */
export function claimOfKeys(
  db: Db,
  keys: readonly KeyLimit[],
  opts: { now: number; leaseMs: number; token: string; maxPerKey: number },
): ClaimedEvent[] {
  const picked: number[] = [];
  for (const key of keys) {
    if (key.limit <= 0) continue;
    const room =
      (key.leaseAhead ?? 0) > opts.maxPerKey
        ? leaseRoom({ ...leasesOfKey(db, key, opts), cap: opts.maxPerKey, ahead: key.leaseAhead!, limit: key.limit })
        : Math.min(key.limit, opts.maxPerKey - leasedOfKey(db, key, opts.now));
    if (room > 0) picked.push(...keyPicks(db, key, opts.now, room, false));
  }
  if (picked.length === 0) return [];
  return eventsInDueOrder(lease(db, picked, opts));
}

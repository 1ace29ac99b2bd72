import { and, asc, desc, eq, gt, gte, inArray, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { DeliveryKey, EventStore } from "../../store/store.js";
import type { AttemptRow, EventRow, NewAttemptRow, NewEventRow } from "../../store/rows.js";
import { deliveryKey } from "../../store/delivery-key.js";
import { retryingEvent } from "../kit/delivery-failing.js";
import type { SqliteContext } from "./context.js";
import { claimDue, claimOfKey, claimOfKeys, claimTrial, firstDueOfKeys, leasedOfKey } from "./event-claims.js";
import { placeInFeed } from "./feed-positions.js";
import type { Db } from "./open.js";
import { insertEveryColumn, prepared, updateWhere } from "./prepared.js";
import { inSavepoint } from "./savepoint.js";
import { addClientStoredBytes } from "./stored-bytes.js";
import { deliveryAttempts, events } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/** What hands a lease back with a write. */
const RELEASED = { claimToken: null, claimedUntil: null } as const;

/** One attempt's record waiting for its turn's unit: the attempt row and its event's next state under the lease. */
interface AttemptRecord {
  eventId: string;
  token: string;
  attempt: NewAttemptRow;
  patch: Partial<NewEventRow>;
}

interface Queued {
  record: AttemptRecord;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Records one unit of the group commit writes at most: a unit is never cut by the turn's budget,
 * and a record cost up to about 1 ms under load (issue #38's bound on a turn).
 */
export const RECORDS_PER_UNIT = 16;

/**
 * Records queued for one commit at which it stops lingering for more (GroupCommit.closeSoon): past
 * about 30 a commit, a record's share of the COMMIT, its WAL frames and its sync is small
 * (docs/performance.md, delivery's tenth round), and the flush stays within two units.
 */
export const RECORDS_PER_COMMIT = 32;

/**
 * The attempt records of one turn as ONE unit of the group commit: one savepoint around all of
 * them (not one per attempt: a savepoint costs as much as a small insert), so they share the
 * transaction, and the fsync, of the claims and transitions queued in the same turn. Should the
 * unit fail (a value SQLite refuses slipped past the core's cleaning), it is rolled back and each
 * record written again under a savepoint of its own, so one bad record never loses another.
 */
class AttemptRecords {
  /** The records of the unit queued and not yet run (null: none queued, or it is full). */
  private open: Queued[] | null = null;
  /** Records queued in units not yet run. */
  private queued = 0;

  constructor(private readonly s: SqliteContext) {}

  add(record: AttemptRecord): Promise<void> {
    return new Promise((resolve, reject) => {
      if (++this.queued >= RECORDS_PER_COMMIT) this.s.attemptCommits.closeSoon();
      if (this.open) {
        this.open.push({ record, resolve, reject });
        this.s.attemptCommits.lingerOn();
        if (this.open.length >= RECORDS_PER_UNIT) this.open = null;
        return;
      }
      // The first record queues the unit; it takes the records added until the commit runs it, RECORDS_PER_UNIT at most.
      const batch: Queued[] = [{ record, resolve, reject }];
      this.open = batch;
      let ran = false;
      this.s.attemptCommits
        .runAtomic(
          () => {
            ran = true;
            if (this.open === batch) this.open = null;
            this.queued -= batch.length;
            return this.write(batch.map((q) => q.record));
          },
          // The commit waits for more records (GroupCommit's lingerMs) while attempts are on the wire.
          { linger: true },
        )
        .then(
          (errors) => {
            for (const [i, q] of batch.entries()) {
              if (errors[i] === undefined) q.resolve();
              else q.reject(errors[i]);
            }
          },
          // The transaction itself failed (disk full, I/O), or the store closed: nothing of the turn is durable.
          (error: unknown) => {
            if (this.open === batch) this.open = null;
            if (!ran) this.queued -= batch.length;
            for (const q of batch) q.reject(error);
          },
        );
    });
  }

  /** Writes the records; per record, the error that kept it out (undefined: written). */
  private write(batch: AttemptRecord[]): unknown[] {
    const { db, sqlite } = this.s.database;
    const one = (r: AttemptRecord, bytes: Map<string, number>) => {
      insertAttemptRow(db, r.attempt);
      updateLeased(db, r.eventId, r.token, { ...r.patch, ...RELEASED });
      countAttemptBytes(bytes, r.attempt);
    };
    try {
      inSavepoint(sqlite, () => {
        const bytes = new Map<string, number>();
        for (const r of batch) one(r, bytes);
        addStoredBytes(db, bytes);
      });
      return batch.map(() => undefined);
    } catch (error) {
      // An error that ended the transaction fails the whole group commit anyway.
      if (!sqlite.inTransaction || batch.length === 1) return batch.map(() => error);
    }
    return batch.map((r) => {
      try {
        inSavepoint(sqlite, () => {
          const bytes = new Map<string, number>();
          one(r, bytes);
          addStoredBytes(db, bytes);
        });
        return undefined;
      } catch (error) {
        return error;
      }
    });
  }
}

/**
 * The EventStore on SQLite: the outbox, attempts, re-queues and the feed; the claims under the
 * per-key cap are in event-claims.ts.
 */
export function sqliteEvents(s: SqliteContext): EventStore {
  const db = s.database.db;
  const records = new AttemptRecords(s);
  return {
    // Claims share the attempt records' group commit (one fsync for everything settling and starting
    // in a turn); each is one UPDATE after its reads, so atomic without a savepoint.
    claimDue: (o) => s.attemptCommits.runAtomic(() => claimDue(db, o)),
    nextDueAt: async (o) => nextDueAt(db, o),
    // The turn's records are one unit queued before the claims its settles ask for (AttemptRecords).
    recordsBeforeClaims: true,
    // Attempts on the wire hold the turn's commit a few ms for their records (GroupCommit.expect).
    recordWindow: s.attemptCommits,
    recordAttempt: (eventId, token, attempt, patch) => records.add({ eventId, token, attempt, patch }),
    release: async (eventId, token, patch) => {
      updateLeased(db, eventId, token, { ...patch, ...RELEASED });
    },
    // A circuit's opening moves the key's events in the turn's commit, with the record that opened it.
    postponeKey: (clientId, host, until, now) =>
      s.attemptCommits.runAtomic(() => postponeKey(db, clientId, host, until, now)),
    claimTrial: async (key, o) => claimTrial(db, key, o),
    // As on PostgreSQL: the key's leased events count against maxPerKey (also a CLI or a second process's leases).
    claimOfKey: (key, o) =>
      s.attemptCommits.runAtomic(() =>
        claimOfKey(db, key, { ...o, limit: Math.min(o.limit, o.maxPerKey - leasedOfKey(db, key, o.now)) }),
      ),
    // A refill nobody waits on at once (its keys' leased-ahead events still start) lingers with the records.
    claimOfKeys: (keys, o) => s.attemptCommits.runAtomic(() => claimOfKeys(db, keys, o), { linger: o.linger === true }),
    retryKeyNow: async (key, now) => retryKeyNow(db, key, now),
    pendingOfKey: async (key) => pendingOfKey(db, key),
    requeueLastOfTask: async (taskId, round) =>
      db.transaction((tx) => {
        const event = lastOfTask(tx, taskId);
        return event ? update(tx, event.id, round) : undefined;
      }),
    requeueFailed: async (clientId, since, round) => requeueFailed(db, clientId, since, round),
    retryingOfClient: async (clientId) => retryingOfClient(db, clientId),
    find: async (id) => find(db, id),
    lastOfTask: async (taskId) => lastOfTask(db, taskId),
    lastOfTasks: async (taskIds) => lastOfTasks(db, taskIds),
    ofTask: async (taskId) => ofTask(db, taskId),
    attemptsOfTask: async (taskId) => attemptsOfTask(db, taskId),
    attemptCounts: async (eventIds) => attemptCounts(db, eventIds),
    feed: async (clientId, afterPos, limit) => {
      placeInFeed(db, clientId, limit);
      return feed(db, clientId, afterPos, limit);
    },
    clientSeqAtOrBefore: async (clientId, seq) => {
      placeInFeed(db, clientId, 1_000);
      return clientSeqAtOrBefore(db, clientId, seq);
    },
  };
}

export function insert(db: DbOrTx, row: NewEventRow): EventRow {
  return db.insert(events).values(row).returning().all()[0]!;
}

/**
 * Writes an outbox event (every column bound, on a statement prepared once), not yet placed in its
 * client's feed (client_seq 0): the feed's reader hands out positions (feed-positions.ts).
 */
export function insertPrepared(db: Db, row: Omit<NewEventRow, "clientSeq">): void {
  insertEveryColumn(db, events, { ...row, clientSeq: 0 }, ["seq"]);
}

/** Every event of a task, in the task's order (the operator's `tasks show`). */
export function ofTask(db: DbOrTx, taskId: string): EventRow[] {
  return db.select().from(events).where(eq(events.taskId, taskId)).orderBy(asc(events.sequence)).all();
}

export function find(db: DbOrTx, id: string): EventRow | undefined {
  return db.select().from(events).where(eq(events.id, id)).get();
}

/** The task's newest event, by the row of its own callback (an endpoint's rows share its sequence). */
export function lastOfTask(db: DbOrTx, taskId: string): EventRow | undefined {
  return db
    .select()
    .from(events)
    .where(and(eq(events.taskId, taskId), isNull(events.endpointId)))
    .orderBy(desc(events.sequence))
    .limit(1)
    .get();
}

/** The newest event of each task, for the delivery summary on task reads. */
export function lastOfTasks(db: DbOrTx, taskIds: string[]): Map<string, EventRow> {
  const map = new Map<string, EventRow>();
  if (taskIds.length === 0) return map;
  const rows = db
    .select()
    .from(events)
    .where(
      and(
        inArray(events.taskId, taskIds),
        isNull(events.endpointId),
        sql`${events.sequence} = (SELECT max(e2.sequence) FROM events e2 WHERE e2.task_id = ${events.taskId})`,
      ),
    )
    .all();
  for (const row of rows) map.set(row.taskId, row);
  return map;
}

/**
 * When the next unleased pending event is due, leaving out the given destination hosts. Walks the
 * (delivery_status, next_attempt_at) index at most `scan` rows deep; past them (a backlog queued
 * behind a saturated host), the other keys' first unleased events one seek each (firstDueOfKeys),
 * so a backlog costs the table's keys, not its length, and the answer is exact either way.
 */
export function nextDueAt(
  db: Db,
  opts: { now: number; excludeKeys?: string[]; excludeClients?: string[]; scan?: number },
): number | null {
  const scan = opts.scan ?? NEXT_DUE_SCAN;
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
  ).all({ now: opts.now, scan });
  if (rows.length === 0) return null;
  const excluded = new Set(opts.excludeKeys ?? []);
  const clientsOut = new Set(opts.excludeClients ?? []);
  for (const row of rows)
    if (!excluded.has(deliveryKey(row.clientId, row.host)) && !clientsOut.has(row.clientId)) return row.at;
  return rows.length < scan ? null : firstDueOfKeys(db, opts.now, opts.excludeKeys ?? [], opts.excludeClients ?? []);
}

/** How deep nextDueAt walks the due index before it asks key by key. */
const NEXT_DUE_SCAN = 32;

/**
 * Moves a delivery key's due, unleased pending events to `until` (the end of its circuit's
 * cool-down): no attempt is recorded and the retry schedule is not advanced. One indexed update
 * per opening, so the claim query never has to know which circuits are open. Returns how many moved.
 */
export function postponeKey(db: Db, clientId: string, host: string, until: number, now: number): number {
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

/**
 * Writes a patch to an event while the caller's lease holds; true when it did. `db` is the database
 * (its statements, one per shape of patch, are prepared once), also inside its open transaction.
 */
export function updateLeased(db: Db, id: string, token: string, patch: Partial<NewEventRow>): boolean {
  return updateWhere(db, events, patch, ["id", "claimToken"], [id, token]) > 0;
}

export function update(db: DbOrTx, id: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db.update(events).set(patch).where(eq(events.id, id)).returning().all()[0];
}

/** Records an attempt and counts its bytes to its client (prepared once; every column bound, absent ones as NULL). */
export function insertAttempt(db: Db, row: NewAttemptRow): void {
  insertAttemptRow(db, row);
  addClientStoredBytes(db, row.clientId, attemptBytes(row));
}

/**
 * An attempt row alone: its bytes are the caller's to count (client_storage; the insert trigger
 * was one upsert per row, migrations/0015_attempt_bytes_by_commit.sql). The delete trigger takes
 * them off again, so the count must be what SQLite's length(CAST(x AS BLOB)) gives: UTF-8 bytes.
 */
function insertAttemptRow(db: Db, row: NewAttemptRow): void {
  insertEveryColumn(db, deliveryAttempts, row);
}

/** An attempt's stored bytes: its URL, error and stored answer, as UTF-8. */
function attemptBytes(row: NewAttemptRow): number {
  return (
    Buffer.byteLength(row.url, "utf8") +
    (row.error == null ? 0 : Buffer.byteLength(row.error, "utf8")) +
    (row.responseBody == null ? 0 : Buffer.byteLength(row.responseBody, "utf8"))
  );
}

function countAttemptBytes(bytes: Map<string, number>, row: NewAttemptRow): void {
  bytes.set(row.clientId, (bytes.get(row.clientId) ?? 0) + attemptBytes(row));
}

/** One upsert per client of what a unit's attempt rows hold. */
function addStoredBytes(db: Db, bytes: Map<string, number>): void {
  for (const [clientId, n] of bytes) addClientStoredBytes(db, clientId, n);
}

export function attemptsOfTask(db: DbOrTx, taskId: string): AttemptRow[] {
  return db
    .select()
    .from(deliveryAttempts)
    .where(eq(deliveryAttempts.taskId, taskId))
    .orderBy(asc(deliveryAttempts.attemptedAt), asc(deliveryAttempts.id))
    .all();
}

/** Attempts logged per event, through delivery_attempts_event_idx. */
export function attemptCounts(db: DbOrTx, eventIds: string[]): Map<string, number> {
  if (eventIds.length === 0) return new Map();
  const rows = db
    .select({ eventId: deliveryAttempts.eventId, n: sql<number>`count(*)` })
    .from(deliveryAttempts)
    .where(inArray(deliveryAttempts.eventId, eventIds))
    .groupBy(deliveryAttempts.eventId)
    .all();
  return new Map(rows.map((r) => [r.eventId, Number(r.n)]));
}

/** The pull feed: a client's events after a position in its own feed, in order. */
export function feed(db: DbOrTx, clientId: string, afterPos: number, limit: number): EventRow[] {
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
export function requeueFailed(db: DbOrTx, clientId: string, since: number, round: Partial<NewEventRow>): number {
  return db
    .update(events)
    .set(round)
    .where(and(eq(events.clientId, clientId), eq(events.deliveryStatus, "failed"), gte(events.createdAt, since)))
    .run().changes;
}

/** Retry-now: the key's pending, unleased events due at once (a paused key's included). */
export function retryKeyNow(db: Db, key: DeliveryKey, now: number): number {
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

/** How many of the client's events are retrying (see retryingEvent): the dashboard's "delivery failing". */
export function retryingOfClient(db: DbOrTx, clientId: string): number {
  return db
    .select({ n: sql<number>`count(*)` })
    .from(events)
    .where(and(eq(events.clientId, clientId), sql.raw(retryingEvent("events"))))
    .get()!.n;
}

export function pendingOfKey(db: Db, key: DeliveryKey): number {
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

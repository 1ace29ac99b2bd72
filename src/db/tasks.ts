import { and, asc, eq, gt, gte, inArray, isNull, lt, lte, or, sql, type SQL } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import { insertEveryColumn, patchShape, prepared } from "./sqlite/prepared.js";
import type { InFlightTask } from "../store/store.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { clients, tasks, type TaskPhase } from "./sqlite/schema.js";

import type { NewTaskRow, TaskRow } from "../store/rows.js";

export type { NewTaskRow, TaskRow };

export function insertTask(db: DbOrTx, row: NewTaskRow): TaskRow {
  return db.insert(tasks).values(row).returning().all()[0]!;
}

/** findTaskByIdempotencyKey on a statement prepared once (the intake's hot path). */
export function findTaskByIdempotencyKeyPrepared(db: Db, clientId: string, key: string): TaskRow | undefined {
  return prepared(db, "tasks.byIdempotencyKey", () =>
    db
      .select()
      .from(tasks)
      .where(and(eq(tasks.clientId, sql.placeholder("clientId")), eq(tasks.idempotencyKey, sql.placeholder("key"))))
      .prepare(),
  ).get({ clientId, key });
}

/** insertTask on a statement prepared once: every column bound (schema defaults filled in), and the bound row is the stored row. */
export function insertTaskPrepared(db: Db, row: NewTaskRow): TaskRow {
  return insertEveryColumn<TaskRow>(db, tasks, row);
}

export function findTask(db: DbOrTx, id: string): TaskRow | undefined {
  return db.select().from(tasks).where(eq(tasks.id, id)).get();
}

/** A client's task, or undefined for an unknown id or another client's task (the two must look the same). */
export function findClientTask(db: DbOrTx, clientId: string, id: string): TaskRow | undefined {
  return db
    .select()
    .from(tasks)
    .where(and(eq(tasks.id, id), eq(tasks.clientId, clientId)))
    .get();
}

/**
 * Updates a task only while the caller's lease holds (token matches), so a worker whose
 * lease expired and was taken over cannot overwrite the newer owner's result.
 */
export function updateLeasedTask(
  db: DbOrTx,
  id: string,
  token: string,
  patch: Partial<NewTaskRow>,
): TaskRow | undefined {
  return db
    .update(tasks)
    .set(patch)
    .where(and(eq(tasks.id, id), eq(tasks.claimToken, token)))
    .returning()
    .all()[0];
}

/**
 * Writes a non-empty patch (while the lease `token` holds, when given) without reading the row
 * back; true when it did. One statement per shape of patch, prepared once on the database (also
 * inside a transaction open on it).
 */
export function writeTask(db: Db, id: string, token: string | null, patch: Partial<NewTaskRow>): boolean {
  const shape = patchShape(patch);
  const statement = prepared(db, `tasks.write:${token === null ? "any" : "leased"}:${shape.join(",")}`, () =>
    db
      .update(tasks)
      .set(Object.fromEntries(shape.map((k) => [k, sql.placeholder(k)])) as Partial<NewTaskRow>)
      .where(
        token === null
          ? eq(tasks.id, sql.placeholder("__id"))
          : and(eq(tasks.id, sql.placeholder("__id")), eq(tasks.claimToken, sql.placeholder("__token"))),
      )
      .prepare(),
  );
  return statement.run({ ...patch, __id: id, __token: token }).changes > 0;
}

/** The task bound to an upstream id on an account, through tasks_upstream_task_uq (prepared once). */
export function findTaskByUpstreamId(db: Db, account: string, upstreamTaskId: string): TaskRow | undefined {
  return prepared(db, "tasks.byUpstreamId", () =>
    db
      .select()
      .from(tasks)
      .where(
        and(
          eq(tasks.upstreamAccount, sql.placeholder("account")),
          eq(tasks.upstreamTaskId, sql.placeholder("upstreamTaskId")),
        ),
      )
      .prepare(),
  ).get({ account, upstreamTaskId });
}

/** findTask on a statement prepared once (transitions read the row first). */
export function findTaskPrepared(db: Db, id: string): TaskRow | undefined {
  return prepared(db, "tasks.find", () =>
    db
      .select()
      .from(tasks)
      .where(eq(tasks.id, sql.placeholder("id")))
      .prepare(),
  ).get({ id });
}

function unclaimed(now: number): SQL {
  return or(isNull(tasks.claimedUntil), lt(tasks.claimedUntil, now))!;
}

/** Claims due tasks of one phase and account with a lease; one UPDATE … RETURNING. */
export function claimDueTasks(
  db: Db,
  opts: {
    phase: TaskPhase;
    account: string;
    now: number;
    leaseMs: number;
    token: string;
    limit: number;
    ids?: string[];
    /** Only tasks read at least once before (poll_count > 0). */
    observedOnly?: boolean;
  },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const conditions: SQL[] = [
    eq(tasks.phase, opts.phase),
    eq(tasks.upstreamAccount, opts.account),
    lte(tasks.nextRunAt, opts.now),
    unclaimed(opts.now),
  ];
  if (opts.ids) {
    if (opts.ids.length === 0) return [];
    conditions.push(inArray(tasks.id, opts.ids));
  }
  if (opts.observedOnly) conditions.push(gt(tasks.pollCount, 0));
  const due = db
    .select({ id: tasks.id })
    .from(tasks)
    .where(and(...conditions))
    .orderBy(asc(tasks.nextRunAt), asc(tasks.id))
    .limit(opts.limit);
  return db
    .update(tasks)
    .set({ claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token })
    .where(inArray(tasks.id, due))
    .returning()
    .all();
}

/**
 * Claims waiting tasks past their expiry that were never offered upstream, due or not (one held back
 * by concurrency, a pause or backoff still expires on time).
 */
export function claimExpiredWaiting(
  db: Db,
  opts: { now: number; leaseMs: number; token: string; limit: number },
): TaskRow[] {
  const expired = db
    .select({ id: tasks.id })
    .from(tasks)
    .where(
      and(eq(tasks.phase, "waiting"), eq(tasks.submitAttempts, 0), lte(tasks.expiresAt, opts.now), unclaimed(opts.now)),
    )
    .orderBy(asc(tasks.expiresAt))
    .limit(opts.limit);
  return db
    .update(tasks)
    .set({ claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token })
    .where(inArray(tasks.id, expired))
    .returning()
    .all();
}

/** Earliest expiry among waiting tasks that can still expire, for the submitter to wake at. */
export function nextExpiryAt(db: Db): number | null {
  const row = db
    .select({ at: tasks.expiresAt })
    .from(tasks)
    .where(and(eq(tasks.phase, "waiting"), sql`${tasks.expiresAt} IS NOT NULL`, eq(tasks.submitAttempts, 0)))
    .orderBy(asc(tasks.expiresAt))
    .limit(1)
    .get();
  return row?.at ?? null;
}

/**
 * Earliest next_run_at among unclaimed tasks of a phase (any account), for the loop to sleep until.
 * Rows under a lease are skipped: their holder reschedules them, and an abandoned lease is found by
 * the loop's idle wake-up. Walks the (phase, next_run_at) index, so it costs the same at any backlog.
 */
export function nextDueAt(db: Db, phase: TaskPhase, now: number): number | null {
  const row = db
    .select({ at: tasks.nextRunAt })
    .from(tasks)
    .where(and(eq(tasks.phase, phase), sql`${tasks.nextRunAt} IS NOT NULL`, unclaimed(now)))
    .orderBy(asc(tasks.nextRunAt))
    .limit(1)
    .get();
  // A lease that runs out (its holder died) makes its row due again then: wake for it, not at the idle timer.
  const lease = db
    .select({ at: sql<number | null>`min(${tasks.claimedUntil})` })
    .from(tasks)
    .where(and(eq(tasks.phase, phase), gte(tasks.claimedUntil, now)))
    .get();
  const due = row?.at ?? null;
  const expiry = lease?.at === null || lease?.at === undefined ? null : lease.at + 1;
  if (due === null) return expiry;
  return expiry === null ? due : Math.min(due, expiry);
}

/** Accounts that have tasks in a phase due now: one index probe per account (accounts are few). */
export function accountsWithDueTasks(db: Db, phase: TaskPhase, now: number): string[] {
  const accounts = db.selectDistinct({ account: clients.upstreamAccount }).from(clients).all();
  return accounts
    .map((r) => r.account)
    .filter((account) =>
      db
        .select({ one: sql<number>`1` })
        .from(tasks)
        .where(
          and(eq(tasks.phase, phase), eq(tasks.upstreamAccount, account), lte(tasks.nextRunAt, now), unclaimed(now)),
        )
        .limit(1)
        .get(),
    );
}

/** Tasks submitted upstream and not yet terminal: they occupy the account's concurrency. */
export function countRunning(db: Db, account: string): number {
  const row = db
    .select({ n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.phase, "submitted"), eq(tasks.upstreamAccount, account)))
    .get();
  return row?.n ?? 0;
}

export function countByPhaseForClient(db: Db, clientId: string, phase: TaskPhase): number {
  const row = db
    .select({ n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), eq(tasks.phase, phase)))
    .get();
  return row?.n ?? 0;
}

/** Waiting tasks of an account created before this one (ids are time-ordered): its queue position - 1. */
export function waitingAhead(db: DbOrTx, account: string, id: string): number {
  const row = db
    .select({ n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.phase, "waiting"), eq(tasks.upstreamAccount, account), lt(tasks.id, id)))
    .get();
  return row?.n ?? 0;
}

/** A client's waiting tasks never offered upstream and not leased: revocation cancels them. */
export function unsubmittedOfClient(db: DbOrTx, clientId: string, now: number): TaskRow[] {
  return db
    .select()
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), eq(tasks.phase, "waiting"), eq(tasks.submitAttempts, 0), unclaimed(now)))
    .all();
}

/**
 * Credits of a client came back (a reservation ended): its waiting tasks held back until later are
 * due again now, so one that waited for room is looked at at once (account pauses and caps still apply).
 */
export function wakeWaitingOfClient(db: DbOrTx, clientId: string, now: number): void {
  db.update(tasks)
    .set({ nextRunAt: now })
    .where(
      and(
        eq(tasks.clientId, clientId),
        eq(tasks.phase, "waiting"),
        eq(tasks.submitAttempts, 0),
        gt(tasks.nextRunAt, now),
        unclaimed(now),
      ),
    )
    .run();
}

/** Releases every task lease (start of a single-process relay: any lease left is a dead process's). */
export function releaseAllTaskLeases(db: Db): number {
  return db
    .update(tasks)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${tasks.claimToken} IS NOT NULL`)
    .run().changes;
}

/** The in-flight tasks of an account, narrow rows (a list sweep compares them with what it read). */
export function listInFlight(db: Db, account: string): InFlightTask[] {
  return db
    .select({
      id: tasks.id,
      upstreamTaskId: tasks.upstreamTaskId,
      status: tasks.status,
      submittedAt: tasks.submittedAt,
      type: tasks.type,
      model: tasks.model,
    })
    .from(tasks)
    .where(and(eq(tasks.phase, "submitted"), eq(tasks.upstreamAccount, account)))
    .all();
}

/** Claims the given tasks of a phase, due or not, that no one else holds. */
export function claimTasks(
  db: Db,
  opts: { ids: string[]; phase: TaskPhase; now: number; leaseMs: number; token: string },
): TaskRow[] {
  if (opts.ids.length === 0) return [];
  const claimed: TaskRow[] = [];
  // Chunks keep each statement under SQLite's bound-parameter limit.
  for (let i = 0; i < opts.ids.length; i += 500) {
    claimed.push(
      ...db
        .update(tasks)
        .set({ claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token })
        .where(and(inArray(tasks.id, opts.ids.slice(i, i + 500)), eq(tasks.phase, opts.phase), unclaimed(opts.now)))
        .returning()
        .all(),
    );
  }
  return claimed;
}

/** Accounts with tasks in flight upstream. */
export function accountsInFlight(db: Db): string[] {
  return db
    .selectDistinct({ account: tasks.upstreamAccount })
    .from(tasks)
    .where(eq(tasks.phase, "submitted"))
    .all()
    .map((r) => r.account);
}

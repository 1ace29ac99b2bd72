import { Column, and, asc, desc, eq, getTableColumns, gt, gte, isNotNull, lt, sql, or, type SQL } from "drizzle-orm";
import type { ListedTask, SupportTaskQuery, TaskListQuery, TaskStore } from "../../store/store.js";
import type { HourlyCount, NewTaskRow, TaskRow } from "../../store/rows.js";
import { DELIVERY_FAILING_TASK } from "../kit/delivery-failing.js";
import { storedBytesOfClient } from "./stored-bytes.js";
import type { SqliteContext } from "./context.js";
import { sweepInChunks } from "./group-commit.js";
import type { Db } from "./open.js";
import { clientOf, patchShape, prepared } from "./prepared.js";
import { tasks } from "./schema.js";
import type { TaskPhase } from "../../statuses.js";
import { sqliteTaskClaims, unclaimed } from "./task-claims.js";
import type { DbOrTx } from "./tx.js";

/** The TaskStore on SQLite: intake, transitions, submissions, reads and pruning; the claims are task-claims.ts. */
export function sqliteTasks(s: SqliteContext): TaskStore {
  const db = s.database.db;
  const transition = s.transition;
  return {
    ...sqliteTaskClaims(s),
    create: (req) => s.intakeCommits.runAtomic((tx) => s.createIn(db, tx, req)),
    // The workers' writes share one group commit (s.attemptCommits): transitions, submissions, claims
    // and attempt records settling in the same turn of the event loop cost one fsync together.
    // `asLeased`: the lease's own row is the start, no read (the write is still guarded by the lease).
    transition: (task, patch, o) => s.attemptCommits.run((tx) => transition(tx, task, patch, o, o.asLeased === true)),
    // An empty patch changes nothing (drizzle refuses to build its UPDATE): the row while the lease holds.
    reschedule: (id, token, patch) =>
      s.attemptCommits.runAtomic(() =>
        Object.values(patch).some((v) => v !== undefined)
          ? updateLeasedTask(db, id, token, patch)
          : [find(db, id)].find((t) => t?.claimToken === token),
      ),
    beginSubmission: (id, token, decide, o) =>
      s.attemptCommits.run((tx) => {
        const current = find(db, id);
        if (!current || current.claimToken !== token) return null;
        const step = decide(s.submissionContext(tx, current));
        // `current` was read above in this transaction, and deciding writes nothing of the task: no second read.
        const task = step.transition
          ? transition(tx, current, step.patch, { ...o, token }, true)
          : updateLeasedTask(tx, id, token, step.patch);
        return task ? { kind: step.kind, task } : null;
      }),
    decideAndTransition: (id, clientId, decide, o) =>
      s.attemptCommits.run((tx) => {
        const before = clientId === null ? find(db, id) : findOfClient(tx, clientId, id);
        if (!before) return null;
        const patch = decide(before);
        if (patch === null) return { before, after: before };
        const after = transition(tx, before, patch, o, true);
        return after ? { before, after } : null;
      }),
    find: async (id) => find(db, id),
    filesOf: async (id) =>
      prepared(db, "tasks.filesOf", () =>
        db
          .select({ clientId: tasks.clientId, filesJson: tasks.filesJson })
          .from(tasks)
          .where(eq(tasks.id, sql.placeholder("id")))
          .prepare(),
      ).get({ id }),
    findOfClient: async (clientId, id) => findOfClient(db, clientId, id),
    findByAnyId: async (id) => findByAnyId(db, id),
    findByUpstreamId: async (account, upstreamTaskId) => findByUpstreamId(db, account, upstreamTaskId),
    list: async (q) => list(db, q),
    storedBytesOfClient: async (clientId) => storedBytesOfClient(db, clientId),
    listForSupport: async (q) => listForSupport(db, q),
    waitingAhead: async (account, id) => waitingAhead(db, account, id),
    waitingAheadOfEach: async (account, ids) => waitingAheadOfEach(db, account, ids),
    unsubmittedOfClient: async (clientId, now) => unsubmittedOfClient(db, clientId, now),
    countsOfClient: async (clientId) => countsOfClient(db, clientId),
    hourlyCounts: async (clientId, since) => hourlyCounts(db, clientId, since),
    recentCallbackUrls: async (clientId) => recentCallbackUrls(db, clientId),
    // In chunks, each a unit of the workers' commit: a batch of 500 tasks with their events and
    // attempts was one synchronous transaction of the event loop (issue #38 item 7).
    pruneFinished: (before, batch) =>
      sweepInChunks(s.attemptCommits, batch, PRUNE_CHUNK_TASKS, (tx, rows) => pruneFinished(tx, before, rows)),
  };
}

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

/** A value's mapping to what SQLite binds (a Date to its number, a boolean to 0/1). */
type Encoder = { mapToDriverValue(v: unknown): unknown };

/**
 * A drizzle query prepared once with a named placeholder for every value, taken apart: its
 * placeholders' names in the order the statement binds them, each one's column encoder (null where
 * the value is bound as it is) and the statement itself, so a call binds its values straight onto
 * the statement instead of drizzle filling its placeholders (the same SQL text, through the
 * connection's value rules).
 */
interface Positional {
  names: string[];
  encoders: (Encoder | null)[];
  statement: { run(...args: unknown[]): { changes: number } };
}

function positional(query: unknown, what: string): Positional {
  const { query: built, stmt } = query as {
    query: { params: { name?: string; value?: { name?: string }; encoder?: Encoder }[] };
    stmt: Positional["statement"];
  };
  const identity = Column.prototype.mapToDriverValue;
  const names = built.params.map((p) => {
    const name = p.value?.name ?? p.name;
    if (typeof name !== "string") throw new Error(`${what}: a parameter is not a placeholder`);
    return name;
  });
  const encoders = built.params.map((p) => (p.encoder && p.encoder.mapToDriverValue !== identity ? p.encoder : null));
  return { names, encoders, statement: stmt };
}

/**
 * insertTask on a statement prepared once: every column bound (schema defaults filled in), and the
 * bound row is the stored row. Intake's hot path: drizzle builds the INSERT once and each call binds
 * its values positionally (`positional`). `pointsReserved` is given apart, so intake's decision
 * needs no copy of the row to carry it.
 */
export function insertTaskPrepared(db: Db, row: NewTaskRow, pointsReserved: number): TaskRow {
  const { names, defaults, encoders, statement } = prepared(db, "tasks.intakeInsert", () => {
    const all = Object.entries(getTableColumns(tasks));
    const defaults: Record<string, unknown> = Object.fromEntries(
      all
        .filter(([, col]) => col.hasDefault && col.default !== undefined && typeof col.default !== "object")
        .map(([key, col]) => [key, col.default]),
    );
    const query = db
      .insert(tasks)
      .values(Object.fromEntries(all.map(([key]) => [key, sql.placeholder(key)])) as never)
      .prepare();
    return { ...positional(query, "tasks insert"), defaults };
  });
  const bound: Record<string, unknown> = {};
  const args: unknown[] = new Array(names.length);
  for (let i = 0; i < names.length; i++) {
    const c = names[i]!;
    const v = c === "pointsReserved" ? pointsReserved : ((row as Record<string, unknown>)[c] ?? defaults[c] ?? null);
    bound[c] = v;
    const encoder = encoders[i];
    args[i] = encoder ? encoder.mapToDriverValue(v) : v;
  }
  statement.run(...args);
  return bound as TaskRow;
}

/** A task by id, on the statement prepared once (findTaskPrepared): the submitter, polls and transitions read it first, inside their transaction. */
export function find(db: Db, id: string): TaskRow | undefined {
  return findTaskPrepared(db, id);
}

/** A client's task, or undefined for an unknown id or another client's task (the two must look the same). */
export function findOfClient(db: DbOrTx, clientId: string, id: string): TaskRow | undefined {
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
 *
 * `before`: the row as read in this same transaction, under the same lease. A column the patch sets
 * to the value it already holds is left out of the SET: SQLite rewrites the entries of every index
 * (and runs every `UPDATE OF` trigger) on a column the SET names, changed or not (issue #43: a
 * transition names status, points and output columns it leaves as they are). When nothing is left,
 * the row already is what the patch says and nothing is written.
 */
export function writeTask(
  db: Db,
  id: string,
  token: string | null,
  patch: Partial<NewTaskRow>,
  before?: TaskRow,
): boolean {
  const shape = before === undefined ? patchShape(patch) : changedShape(patch, before);
  if (shape.length === 0) return true;
  const { names, encoders, statement } = prepared(
    db,
    `tasks.write:${token === null ? "any" : "leased"}:${shape.join(",")}`,
    () =>
      positional(
        db
          .update(tasks)
          .set(Object.fromEntries(shape.map((k) => [k, sql.placeholder(k)])) as Partial<NewTaskRow>)
          .where(
            token === null
              ? eq(tasks.id, sql.placeholder("__id"))
              : and(eq(tasks.id, sql.placeholder("__id")), eq(tasks.claimToken, sql.placeholder("__token"))),
          )
          .prepare(),
        "tasks write",
      ),
  );
  // Bound positionally (issue #43: drizzle filling the placeholders of a { ...patch } copy was about
  // a quarter of a transition's write under the profiler).
  const args: unknown[] = new Array(names.length);
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const v = name === "__id" ? id : name === "__token" ? token : (patch as Record<string, unknown>)[name];
    const encoder = encoders[i];
    args[i] = encoder ? encoder.mapToDriverValue(v) : v;
  }
  return statement.run(...args).changes > 0;
}

/** patchShape's keys whose value differs from the row's (both plain text, integers or null). */
function changedShape(patch: Partial<NewTaskRow>, before: TaskRow): string[] {
  const p = patch as Record<string, unknown>;
  const b = before as unknown as Record<string, unknown>;
  return patchShape(patch).filter((k) => p[k] !== b[k]);
}

/** The task bound to an upstream id on an account, through tasks_upstream_task_uq (prepared once). */
export function findByUpstreamId(db: Db, account: string, upstreamTaskId: string): TaskRow | undefined {
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

/** The connection under drizzle: statements prepared on it bind and read without drizzle's per-call work. */

/** Every column of `tasks`, in the order TASK_ROW's keys read them. */
const TASK_COLUMNS = Object.entries(getTableColumns(tasks));
/**
 * A TaskRow from one row read in array mode: an object literal of every key, one shape for every row
 * (each column is plain text or integer: nothing to decode). Made once from the schema.
 */
const taskRowOf = new Function(
  "r",
  `return {${TASK_COLUMNS.map(([key], i) => `${JSON.stringify(key)}: r[${i}]`).join(", ")}};`,
) as (values: unknown[]) => TaskRow;

/**
 * find on a statement prepared once (transitions, submissions and polls read the row first), on the
 * connection itself in array mode, mapped by taskRowOf (issue #43: drizzle's generic row mapping was
 * 167 µs a task end to end under the profiler).
 */
export function findTaskPrepared(db: Db, id: string): TaskRow | undefined {
  const client = clientOf(db);
  const values = prepared(db, "tasks.find", () =>
    client.prepare(`SELECT ${TASK_COLUMNS.map(([, c]) => `"${c.name}"`).join(", ")} FROM tasks WHERE id = ?`).raw(true),
  ).get(id) as unknown[] | undefined;
  return values === undefined ? undefined : taskRowOf(values);
}

export function countByPhaseForClient(db: Db, clientId: string, phase: TaskPhase): number {
  const row = db
    .select({ n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), eq(tasks.phase, phase)))
    .get();
  return row?.n ?? 0;
}

/** Tasks at or after an id read through the primary key before waitingAhead counts the other way. */
const WAITING_AHEAD_NEWER_SCAN = 256;

/**
 * Waiting tasks of an account created before this one (ids are time-ordered): its queue position - 1.
 * Counting them by their id reads each waiting task's row (no index holds phase, account and id), a
 * table lookup per task in the queue: about 1 ms a creation's answer with a thousand waiting (issue
 * #43). So the tasks at or after `id` (a waiting task is seldom old: few) are read first, at most
 * WAITING_AHEAD_NEWER_SCAN of them through the primary key, and their waiting ones of the account
 * taken from the account's waiting count, which the (phase, account, …) index answers alone.
 * Both reads are synchronous on the one connection: no commit falls between them.
 */
export function waitingAhead(db: Db, account: string, id: string): number {
  const client = clientOf(db);
  const newer = prepared(db, "tasks.waitingNewer", () =>
    client
      .prepare(
        `SELECT count(*), coalesce(sum(phase = 'waiting' AND upstream_account = ?), 0) FROM (SELECT phase, upstream_account FROM tasks WHERE id >= ? ORDER BY id LIMIT ${WAITING_AHEAD_NEWER_SCAN + 1})`,
      )
      .raw(true),
  ).get(account, id) as [number, number];
  if (newer[0] <= WAITING_AHEAD_NEWER_SCAN) {
    // `? IS NOT NULL`: an id the value rules bind as NULL (text with NUL) has none ahead, as by `id < ?`.
    const waiting = prepared(db, "tasks.waitingOfAccount", () =>
      client
        .prepare("SELECT count(*) FROM tasks WHERE phase = 'waiting' AND upstream_account = ? AND ? IS NOT NULL")
        .pluck(),
    ).get(account, id) as number;
    return waiting - newer[1];
  }
  return prepared(db, "tasks.waitingAhead", () =>
    client.prepare("SELECT count(*) FROM tasks WHERE phase = 'waiting' AND upstream_account = ? AND id < ?").pluck(),
  ).get(account, id) as number;
}

/**
 * waitingAhead of several tasks of one account at once: the account's waiting tasks up to the last
 * id numbered in one pass (the same range one waitingAhead counts), only the asked ids returned.
 */
export function waitingAheadOfEach(db: DbOrTx, account: string, ids: readonly string[]): Map<string, number> {
  if (ids.length === 0) return new Map();
  let last = ids[0]!;
  for (const id of ids) if (id > last) last = id;
  const rows = db.all<{ id: string; ahead: number }>(sql`
    SELECT id, ahead FROM (
      SELECT id, row_number() OVER (ORDER BY id) - 1 AS ahead FROM tasks
       WHERE phase = 'waiting' AND upstream_account = ${account} AND id <= ${last}
    ) WHERE id IN (${sql.join(
      ids.map((id) => sql`${id}`),
      sql`, `,
    )})`);
  return new Map(rows.map((r) => [r.id, Number(r.ahead)]));
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
export function wakeWaitingOfClient(db: Db, clientId: string, now: number): void {
  prepared(db, "tasks.wakeWaitingOfClient", () => {
    const at = sql.placeholder("now");
    return db
      .update(tasks)
      .set({ nextRunAt: sql`${at}` })
      .where(
        and(
          eq(tasks.clientId, sql.placeholder("clientId")),
          eq(tasks.phase, "waiting"),
          eq(tasks.submitAttempts, 0),
          gt(tasks.nextRunAt, at),
          unclaimed(at),
        ),
      )
      .prepare();
  }).run({ clientId, now });
}

/** Releases every task lease (start of a single-process relay: any lease left is a dead process's). */
export function releaseAllTaskLeases(db: Db): number {
  return db
    .update(tasks)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${tasks.claimToken} IS NOT NULL`)
    .run().changes;
}

/**
 * The dashboard's list, newest first. The search walks the client's metadata with json_each: no
 * index serves it, which is acceptable for a person typing into a search box, bounded by the
 * client's own tasks.
 */
export function list(db: DbOrTx, q: TaskListQuery): ListedTask[] {
  const conditions: SQL[] = [eq(tasks.clientId, q.clientId)];
  if (q.beforeId) conditions.push(lt(tasks.id, q.beforeId));
  if (q.type) conditions.push(eq(tasks.type, q.type));
  if (q.status) conditions.push(eq(tasks.status, q.status));
  if (q.search) {
    conditions.push(
      or(
        eq(tasks.id, q.search),
        eq(tasks.upstreamTaskId, q.search),
        sql`exists (select 1 from json_each(${tasks.metadataJson}) where json_each.value = ${q.search})`,
      )!,
    );
  }
  if (q.deliveryFailing) conditions.push(sql.raw(DELIVERY_FAILING_TASK));
  const where = and(...conditions);
  if (q.outputMaxBytes === undefined)
    return db.select().from(tasks).where(where).orderBy(desc(tasks.id)).limit(q.limit).all();
  // octet_length reads the value's size from the record header: a large output is never loaded.
  const over = sql`coalesce(octet_length(${tasks.outputJson}) > ${q.outputMaxBytes}, 0)`;
  return db
    .select({
      ...getTableColumns(tasks),
      outputJson: sql<string | null>`CASE WHEN ${over} THEN NULL ELSE ${tasks.outputJson} END`,
      outputOmitted: over.mapWith(Boolean),
    })
    .from(tasks)
    .where(where)
    .orderBy(desc(tasks.id))
    .limit(q.limit)
    .all();
}

/** Tasks created per hour and current status, from `since` on. The clock's time, not SQL now(). */
export function hourlyCounts(db: DbOrTx, clientId: string, since: number): HourlyCount[] {
  const hour = sql<number>`(${tasks.createdAt} / 3600000) * 3600000`;
  return db
    .select({ hour, status: tasks.status, n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), gte(tasks.createdAt, since)))
    .groupBy(hour, tasks.status)
    .all();
}

/**
 * The distinct callback URLs of the client's most recent tasks: what its receivers are today.
 * Bounded to the newest `scan` tasks so the page costs the same for a client with years of history.
 */
export function recentCallbackUrls(db: DbOrTx, clientId: string, scan = 500): string[] {
  const rows = db
    .select({ url: tasks.callbackUrl })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), isNotNull(tasks.callbackUrl)))
    .orderBy(desc(tasks.id))
    .limit(scan)
    .all();
  return [...new Set(rows.map((r) => r.url!))];
}

/**
 * For the operator's support commands (`tasks show`), across every client: the task with this
 * relay id, or else the tasks with this upstream task id. Upstream ids are unique per upstream
 * account only, so more than one task can match on a relay with several. (No index serves
 * upstream_task_id alone: acceptable for a support command, not for a hot path.)
 */
export function findByAnyId(db: DbOrTx, id: string): TaskRow[] {
  const byId = db.select().from(tasks).where(eq(tasks.id, id)).get();
  if (byId) return [byId];
  return db.select().from(tasks).where(eq(tasks.upstreamTaskId, id)).orderBy(asc(tasks.id)).all();
}

/**
 * For `tasks list`, across every client: tasks newest first (ids are time-ordered), optionally of
 * one client and one status.
 */
export function listForSupport(db: DbOrTx, q: SupportTaskQuery): TaskRow[] {
  const conditions: SQL[] = [];
  if (q.clientId) conditions.push(eq(tasks.clientId, q.clientId));
  if (q.status) conditions.push(eq(tasks.status, q.status));
  return db
    .select()
    .from(tasks)
    .where(conditions.length > 0 ? and(...conditions) : undefined)
    .orderBy(desc(tasks.id))
    .limit(q.limit)
    .all();
}

/** A client's retained tasks by status (its credits come from the ledger: ClientStore.ledger). */
export function countsOfClient(db: DbOrTx, clientId: string): Record<string, number> {
  const rows = db
    .select({ status: tasks.status, n: sql<number>`count(*)` })
    .from(tasks)
    .where(eq(tasks.clientId, clientId))
    .groupBy(tasks.status)
    .all();
  const counts: Record<string, number> = { queued: 0, processing: 0, succeeded: 0, failed: 0, canceled: 0 };
  for (const row of rows) counts[row.status] = row.n;
  return counts;
}

/** Finished tasks pruned per unit of the workers' commit (each with its events and attempts). */
const PRUNE_CHUNK_TASKS = 50;

/**
 * Deletes up to `batch` finished tasks completed before `before` whose events are all settled
 * (none still pending), with their events and delivery attempts (ON DELETE CASCADE); the deletes'
 * triggers take what those rows held off their clients' stored bytes (migrations/0011_stored_bytes_triggers.sql).
 * Runs inside the caller's transaction: the store runs it PRUNE_CHUNK_TASKS at a time, each a
 * unit of the workers' group commit, so each write stays short beside the live workers. A task's
 * pending events are looked up by its id (events_task_seq_idx); the `+` keeps the planner off
 * events_due_idx, which would walk every pending event of every client for each candidate task.
 */
export function pruneFinished(tx: DbOrTx, before: number, batch: number): number {
  const ids = tx
    .all<{ id: string }>(sql`
        SELECT t.id FROM tasks t
        WHERE t.phase = 'done' AND t.completed_at < ${before}
          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND +e.delivery_status = 'pending')
        LIMIT ${batch}`)
    .map((r) => r.id);
  if (ids.length === 0) return 0;
  const list = sql.join(
    ids.map((id) => sql`${id}`),
    sql`, `,
  );
  tx.run(sql`DELETE FROM delivery_attempts WHERE event_id IN (SELECT id FROM events WHERE task_id IN (${list}))`);
  tx.run(sql`DELETE FROM events WHERE task_id IN (${list})`);
  tx.run(sql`DELETE FROM tasks WHERE id IN (${list})`);
  return ids.length;
}

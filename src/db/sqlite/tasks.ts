import { and, desc, eq, getTableColumns, gte, isNotNull, lt, or, sql, type SQL } from "drizzle-orm";
import type { HourlyCount, ListedTask, TaskListQuery, TaskStore } from "../../store/store.js";
import { DELIVERY_FAILING_TASK } from "../kit/delivery-failing.js";
import { claimFairly } from "../admission.js";
import { pruneFinishedTasks } from "../retention.js";
import { clientStoredBytes } from "./client-storage.js";
import { claimAcrossClients } from "../round-robin.js";
import { findTasksByAnyId, listTasksForSupport } from "../support.js";
import { findTaskByUpstreamId } from "../tasks.js";
import {
  accountsInFlight,
  accountsWithDueTasks,
  claimDueTasks,
  claimExpiredWaiting,
  claimTasks,
  countRunning,
  findClientTask,
  findTask,
  listInFlight,
  nextDueAt,
  nextExpiryAt,
  unsubmittedOfClient,
  updateLeasedTask,
  waitingAhead,
} from "../tasks.js";
import { taskCounts } from "../usage.js";
import type { SqliteContext } from "./context.js";
import { tasks } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/** The TaskStore on SQLite: tasks: intake, transitions, submissions, claims, reads and pruning. */
export function sqliteTasks(s: SqliteContext): TaskStore {
  const db = s.database.db;
  const transition = s.transition;
  return {
    create: (req) => s.intakeCommits.runAtomic((tx) => s.createIn(db, tx, req)),
    // The workers' writes share one group commit (s.attemptCommits): transitions, submissions, claims
    // and attempt records settling in the same turn of the event loop cost one fsync together.
    transition: (task, patch, o) =>
      s.attemptCommits.run((tx) => transition(tx, task, patch, o.now, o.token, o.firstAttemptDelayMs)),
    // An empty patch changes nothing (drizzle refuses to build its UPDATE): the row while the lease holds.
    reschedule: (id, token, patch) =>
      s.attemptCommits.runAtomic(() =>
        Object.values(patch).some((v) => v !== undefined)
          ? updateLeasedTask(db, id, token, patch)
          : [findTask(db, id)].find((t) => t?.claimToken === token),
      ),
    beginSubmission: (id, token, decide, o) =>
      s.attemptCommits.run((tx) => {
        const current = findTask(tx, id);
        if (!current || current.claimToken !== token) return null;
        const step = decide(s.submissionContext(tx, current));
        const task = step.transition
          ? transition(tx, current, step.patch, o.now, token, o.firstAttemptDelayMs)
          : updateLeasedTask(tx, id, token, step.patch);
        return task ? { kind: step.kind, task } : null;
      }),
    decideAndTransition: (id, clientId, decide, o) =>
      s.attemptCommits.run((tx) => {
        const before = clientId === null ? findTask(tx, id) : findClientTask(tx, clientId, id);
        if (!before) return null;
        const patch = decide(before);
        if (patch === null) return { before, after: before };
        const after = transition(tx, before, patch, o.now, o.token, o.firstAttemptDelayMs);
        return after ? { before, after } : null;
      }),
    find: async (id) => findTask(db, id),
    findOfClient: async (clientId, id) => findClientTask(db, clientId, id),
    findByAnyId: async (id) => findTasksByAnyId(db, id),
    findByUpstreamId: async (account, upstreamTaskId) => findTaskByUpstreamId(db, account, upstreamTaskId),
    list: async (q) => list(db, q),
    storedBytesOfClient: async (clientId) => clientStoredBytes(db, clientId),
    listForSupport: async (q) => listTasksForSupport(db, q),
    waitingAhead: async (account, id) => waitingAhead(db, account, id),
    unsubmittedOfClient: async (clientId, now) => unsubmittedOfClient(db, clientId, now),
    countsOfClient: async (clientId) => taskCounts(db, clientId),
    hourlyCounts: async (clientId, since) => hourlyCounts(db, clientId, since),
    recentCallbackUrls: async (clientId) => recentCallbackUrls(db, clientId),
    claimFairly: (account, o) => s.attemptCommits.runAtomic(() => claimFairly(db, { account, ...o })),
    claimDue: (phase, account, o) => s.attemptCommits.runAtomic(() => claimDueTasks(db, { phase, account, ...o })),
    // Several statements (chunks of ids): in a savepoint of its own.
    claimIds: (ids, phase, o) => s.attemptCommits.run(() => claimTasks(db, { ids, phase, ...o })),
    claimExpired: (o) => s.attemptCommits.runAtomic(() => claimExpiredWaiting(db, o)),
    claimAcrossClients: (phase, o) => s.attemptCommits.run(() => claimAcrossClients(db, phase, o)),
    nextDueAt: async (phase, now) => nextDueAt(db, phase, now),
    nextExpiryAt: async () => nextExpiryAt(db),
    accountsWithDue: async (phase, now) => accountsWithDueTasks(db, phase, now),
    accountsInFlight: async () => accountsInFlight(db),
    countRunning: async (account) => countRunning(db, account),
    listInFlight: async (account) => listInFlight(db, account),
    pruneFinished: async (before, batch) => pruneFinishedTasks(db, before, batch),
  };
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

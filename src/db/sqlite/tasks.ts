import type { TaskStore } from "../../store/store.js";
import { claimFairly } from "../admission.js";
import { hourlyTaskCounts, recentCallbackUrls, searchClientTasks } from "../dashboard.js";
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
    list: async (q) => searchClientTasks(db, q),
    storedBytesOfClient: async (clientId) => clientStoredBytes(db, clientId),
    listForSupport: async (q) => listTasksForSupport(db, q),
    waitingAhead: async (account, id) => waitingAhead(db, account, id),
    unsubmittedOfClient: async (clientId, now) => unsubmittedOfClient(db, clientId, now),
    countsOfClient: async (clientId) => taskCounts(db, clientId),
    hourlyCounts: async (clientId, since) => hourlyTaskCounts(db, clientId, since),
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

import { sql } from "drizzle-orm";
import type {
  AccountStore,
  ClientStore,
  CreateResult,
  EndpointStore,
  EventStore,
  NoticeStore,
  NewTaskRequest,
  OpsStore,
  SessionStore,
  Store,
  SubmissionContext,
  TaskStore,
  TransitionOptions,
  TransitionRules,
} from "../store/store.js";
import { findClient, findClientByKeyHash, insertClient, listClients, markAdmitted, updateClient } from "./clients.js";
import { applyCreditChange, creditPosition, findLearnedPrice, learnPrice, ledgerOf, reservationsAround } from "./credits.js";
import { countRetryingEvents, deleteEndedSessions, findSession, hourlyTaskCounts, insertSession, recentCallbackUrls, revokeSession, searchClientTasks, touchSession } from "./dashboard.js";
import {
  claimDueEvents,
  clientSeqAtOrBefore,
  eventsWithoutDestination,
  findEvent,
  insertAttempt,
  insertEvent,
  lastEventOfTask,
  lastEventsOfTasks,
  listClientEvents,
  listTaskAttempts,
  nextClientEventSeq,
  nextEventDueAt,
  postponeKeyEvents,
  claimTrialEvent,
  retryKeyEventsNow,
  pendingEventsOfKey,
  releaseAllEventLeases,
  releaseEventLeases,
  requeueFailedEvents,
  setDestination,
  updateEvent,
  updateLeasedEvent,
} from "./events.js";
import {
  claimDueNotices,
  endpointsDueForNotice,
  failingEndpointsOf,
  insertNotice,
  markEndpointNoticed,
  nextNoticeDueAt,
  noticesOfClient,
  pruneNotices,
  recordEndpointFailure,
  recordEndpointSuccess,
  recordNotice,
} from "./endpoints.js";
import { GroupCommit } from "./group-commit.js";
import { probeWrite } from "./health.js";
import type { Database_, Db } from "./open.js";
import { pruneFinishedTasks } from "./retention.js";
import { durationStats } from "./schema.js";
import { findTasksByAnyId, listTaskEvents, listTasksForSupport } from "./support.js";
import { claimFairly } from "./admission.js";
import { claimAcrossClients } from "./round-robin.js";
import {
  accountsInFlight,
  accountsWithDueTasks,
  claimDueTasks,
  claimExpiredWaiting,
  claimTasks,
  countByPhaseForClient,
  countRunning,
  findClientTask,
  findTask,
  findTaskByIdempotencyKeyPrepared,
  insertTaskPrepared,
  listInFlight,
  nextDueAt,
  nextExpiryAt,
  releaseAllTaskLeases,
  releaseTaskLeases,
  unsubmittedOfClient,
  updateLeasedTask,
  updateTask,
  waitingAhead,
  wakeWaitingOfClient,
  type NewTaskRow,
  type TaskRow,
} from "./tasks.js";
import type { DbOrTx } from "./tx.js";
import { getAccountState, pruneReads, readsSince, recordRead, upsertAccountState } from "./upstream.js";
import { taskCounts } from "./usage.js";
import { and, eq } from "drizzle-orm";

const NO_RESERVATIONS = { inFlight: 0, ahead: 0, others: 0 };
const RELEASED = { claimToken: null, claimedUntil: null } as const;

/**
 * The state change of TaskStore.transition inside the caller's transaction (or its own statement
 * run when `db` is the database itself: tests seed states this way, synchronously).
 */
export function transitionIn(db: DbOrTx, rules: TransitionRules, id: string, patch: Partial<NewTaskRow>, opts: TransitionOptions): TaskRow | undefined {
  const { now, token, firstAttemptDelayMs } = opts;
  const before = findTask(db, id);
  if (!before || (token && before.claimToken !== token)) return undefined;
  const next = rules.prepare(before, patch);
  const updated = token ? updateLeasedTask(db, id, token, next) : updateTask(db, id, next);
  if (!updated) return undefined;
  const { change, learn, wake } = rules.settle(before, updated);
  applyCreditChange(db, updated.clientId, updated.id, change, now);
  if (wake) wakeWaitingOfClient(db, updated.clientId, now);
  if (learn) learnPrice(db, learn.priceKey, learn.points, now);
  const event = rules.eventFor(before, updated, now, firstAttemptDelayMs);
  if (!event) return updated;
  const withSeq = updateTask(db, id, { eventSequence: event.sequence })!;
  insertEvent(db, { ...event, clientSeq: nextClientEventSeq(db, updated.clientId) });
  return withSeq;
}

/**
 * The store on one SQLite file (better-sqlite3). Every operation runs synchronously inside and
 * returns a settled promise: a transaction never spans an await, so no other work interleaves
 * with it. Creations and delivery attempts go through group commit (one fsync per batch).
 */
export class SqliteStore implements Store {
  readonly dialect = "sqlite" as const;
  readonly tasks: TaskStore;
  readonly events: EventStore;
  readonly endpoints: EndpointStore;
  readonly notices: NoticeStore;
  readonly clients: ClientStore;
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly ops: OpsStore;
  private readonly intakeCommits: GroupCommit;
  private readonly attemptCommits: GroupCommit;

  constructor(
    readonly database: Database_,
    private readonly rules: TransitionRules,
  ) {
    const db = database.db;
    this.intakeCommits = new GroupCommit(db);
    this.attemptCommits = new GroupCommit(db);
    const transition = (tx: DbOrTx, task: TaskRow, patch: Partial<NewTaskRow>, now: number, token: string | null, firstAttemptDelayMs: number) =>
      this.transitionIn(tx, task.id, patch, now, token, firstAttemptDelayMs);

    this.tasks = {
      create: (req) => this.intakeCommits.run((tx) => this.createIn(db, tx, req)),
      transition: async (task, patch, o) => db.transaction((tx) => transition(tx, task, patch, o.now, o.token, o.firstAttemptDelayMs)),
      reschedule: async (id, token, patch) => updateLeasedTask(db, id, token, patch),
      beginSubmission: async (id, token, decide, o) =>
        db.transaction((tx) => {
          const current = findTask(tx, id);
          if (!current || current.claimToken !== token) return null;
          const step = decide(this.submissionContext(tx, current));
          const task = step.transition ? transition(tx, current, step.patch, o.now, token, o.firstAttemptDelayMs) : updateLeasedTask(tx, id, token, step.patch);
          return task ? { kind: step.kind, task } : null;
        }),
      decideAndTransition: async (id, clientId, decide, o) =>
        db.transaction((tx) => {
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
      list: async (q) => searchClientTasks(db, q),
      listForSupport: async (q) => listTasksForSupport(db, q),
      waitingAhead: async (account, id) => waitingAhead(db, account, id),
      unsubmittedOfClient: async (clientId, now) => unsubmittedOfClient(db, clientId, now),
      countsOfClient: async (clientId) => taskCounts(db, clientId),
      hourlyCounts: async (clientId, since) => hourlyTaskCounts(db, clientId, since),
      recentCallbackUrls: async (clientId) => recentCallbackUrls(db, clientId),
      claimFairly: async (account, o) => claimFairly(db, { account, ...o }),
      claimDue: async (phase, account, o) => claimDueTasks(db, { phase, account, ...o }),
      claimIds: async (ids, phase, o) => claimTasks(db, { ids, phase, ...o }),
      claimExpired: async (o) => claimExpiredWaiting(db, o),
      claimAcrossClients: async (phase, o) => claimAcrossClients(db, phase, o),
      nextDueAt: async (phase, now) => nextDueAt(db, phase, now),
      nextExpiryAt: async () => nextExpiryAt(db),
      accountsWithDue: async (phase, now) => accountsWithDueTasks(db, phase, now),
      accountsInFlight: async () => accountsInFlight(db),
      countRunning: async (account) => countRunning(db, account),
      listInFlight: async (account) => listInFlight(db, account),
      pruneFinished: async (before, batch) => pruneFinishedTasks(db, before, batch),
    };

    this.events = {
      claimDue: async (o) => claimDueEvents(db, o),
      nextDueAt: async (o) => nextEventDueAt(db, o),
      recordAttempt: (eventId, token, attempt, patch) =>
        this.attemptCommits.run((tx) => {
          insertAttempt(tx, attempt);
          updateLeasedEvent(tx, eventId, token, { ...patch, ...RELEASED });
        }),
      release: async (eventId, token, patch) => {
        updateLeasedEvent(db, eventId, token, { ...patch, ...RELEASED });
      },
      postponeKey: async (clientId, host, until, now) => postponeKeyEvents(db, clientId, host, until, now),
      claimTrial: async (key, o) => claimTrialEvent(db, key, o),
      retryKeyNow: async (key, now) => retryKeyEventsNow(db, key, now),
      pendingOfKey: async (key) => pendingEventsOfKey(db, key),
      requeueLastOfTask: async (taskId, now) =>
        db.transaction((tx) => {
          const event = lastEventOfTask(tx, taskId);
          if (!event) return undefined;
          // Clearing the lease makes an attempt still in flight unable to record over this re-queue.
          return updateEvent(tx, event.id, { deliveryStatus: "pending", roundAttempts: 0, nextAttemptAt: now, failedAt: null, claimToken: null, claimedUntil: null });
        }),
      requeueFailed: async (clientId, since, now) => requeueFailedEvents(db, clientId, since, now),
      retryingOfClient: async (clientId) => countRetryingEvents(db, clientId),
      find: async (id) => findEvent(db, id),
      lastOfTask: async (taskId) => lastEventOfTask(db, taskId),
      lastOfTasks: async (taskIds) => lastEventsOfTasks(db, taskIds),
      ofTask: async (taskId) => listTaskEvents(db, taskId),
      attemptsOfTask: async (taskId) => listTaskAttempts(db, taskId),
      feed: async (clientId, afterPos, limit) => listClientEvents(db, clientId, afterPos, limit),
      clientSeqAtOrBefore: async (clientId, seq) => clientSeqAtOrBefore(db, clientId, seq),
    };

    this.clients = {
      insert: async (row) => insertClient(db, row),
      find: async (id) => findClient(db, id),
      findByKeyHash: async (hash) => findClientByKeyHash(db, hash),
      list: async () => listClients(db),
      update: async (id, patch) => updateClient(db, id, patch),
      updateWith: async (id, change) =>
        db.transaction((tx) => {
          const client = findClient(tx, id);
          if (!client) return undefined;
          const { patch, result } = change(client);
          return { client: Object.keys(patch).length === 0 ? client : updateClient(tx, id, patch)!, result };
        }),
      markAdmitted: async (id, at) => markAdmitted(db, id, at),
      creditPosition: async (id) => creditPosition(db, id),
      ledger: async (id) => ledgerOf(db, id),
    };

    this.accounts = {
      state: async (account) => getAccountState(db, account),
      updateState: async (account, patch, now) => upsertAccountState(db, account, patch, now),
      takeRead: async (account, at, limit, windowMs) =>
        db.transaction((tx) => {
          if (readsSince(tx, account, at - windowMs).length >= limit) return false;
          recordRead(tx, account, at);
          return true;
        }),
      readsSince: async (account, since) => readsSince(db, account, since),
      pruneReads: async (account, before) => pruneReads(db, account, before),
      durationSamples: async (type, model) => {
        const row = db.select().from(durationStats).where(and(eq(durationStats.type, type), eq(durationStats.model, model))).get();
        return row ? (JSON.parse(row.samplesJson) as number[]) : [];
      },
      saveDurationSamples: async (type, model, samples, now) => {
        const samplesJson = JSON.stringify(samples);
        db.insert(durationStats)
          .values({ type, model, samplesJson, updatedAt: now })
          .onConflictDoUpdate({ target: [durationStats.type, durationStats.model], set: { samplesJson, updatedAt: now } })
          .run();
      },
    };

    this.endpoints = {
      recordFailure: async (key, now, error) => recordEndpointFailure(db, key, now, error),
      recordSuccess: async (key, now) => recordEndpointSuccess(db, key, now),
      dueForNotice: async (before, limit) => endpointsDueForNotice(db, before, limit),
      markNoticed: async (key, failingSince, at) => markEndpointNoticed(db, key, failingSince, at),
      failingOf: async (clientId) => failingEndpointsOf(db, clientId),
    };

    this.notices = {
      insert: async (row) => insertNotice(db, row),
      claimDue: async (o) => claimDueNotices(db, o),
      record: async (id, token, patch) => recordNotice(db, id, token, patch),
      nextDueAt: async (now) => nextNoticeDueAt(db, now),
      ofClient: async (clientId, limit) => noticesOfClient(db, clientId, limit),
      prune: async (before, batch) => pruneNotices(db, before, batch),
    };

    this.sessions = {
      open: async (row, now) =>
        db.transaction((tx) => {
          deleteEndedSessions(tx, now);
          insertSession(tx, row);
        }),
      find: async (hash) => findSession(db, hash),
      touch: async (hash, now) => touchSession(db, hash, now),
      revoke: async (hash, now) => revokeSession(db, hash, now),
    };

    this.ops = {
      leads: async () => true,
      listen: async () => {},
      recover: async (hostOf) => {
        const released = releaseAllTaskLeases(db) + releaseAllEventLeases(db);
        for (const url of eventsWithoutDestination(db)) setDestination(db, url, hostOf(url));
        return released;
      },
      releaseLeases: async (prefix) => releaseTaskLeases(db, prefix) + releaseEventLeases(db, prefix),
      probeWrite: async (now) => probeWrite(database, now),
      gauges: async () => ({
        tasksByStatus: db.all<{ status: string; n: number }>(sql`SELECT status, count(*) AS n FROM tasks GROUP BY status`),
        tasksByAccountPhase: db.all<{ account: string; phase: string; n: number }>(
          sql`SELECT upstream_account AS account, phase, count(*) AS n FROM tasks WHERE phase IN ('waiting', 'submitted') GROUP BY upstream_account, phase`,
        ),
        eventsByStatus: db.all<{ status: string; n: number }>(
          sql`SELECT delivery_status AS status, count(*) AS n FROM events WHERE delivery_status IN ('pending', 'failed') GROUP BY delivery_status`,
        ),
      }),
    };
  }

  async close(): Promise<void> {
    this.database.close();
  }

  private transitionIn(tx: DbOrTx, id: string, patch: Partial<NewTaskRow>, now: number, token: string | null, firstAttemptDelayMs: number): TaskRow | undefined {
    return transitionIn(tx, this.rules, id, patch, { now, token, firstAttemptDelayMs });
  }

  private submissionContext(tx: DbOrTx, task: TaskRow): SubmissionContext {
    const position = creditPosition(tx, task.clientId);
    const learnedPrice = task.priceKey ? findLearnedPrice(tx, task.priceKey) : null;
    const needsAround = position !== undefined && position.limit !== null && !position.revoked && task.submitAttempts === 0;
    return { task, position, learnedPrice, reservations: needsAround ? reservationsAround(tx, task.clientId, task.id) : NO_RESERVATIONS };
  }

  /** Intake, in its group-commit savepoint: the caller's idempotency, the caps and the budget, the insert. */
  private createIn(db: Db, tx: DbOrTx, req: NewTaskRequest): CreateResult {
    const { row } = req;
    // Prepared statements run on the one connection, inside the transaction `tx` has open.
    const existing = findTaskByIdempotencyKeyPrepared(db, row.clientId, row.idempotencyKey);
    if (existing) return { task: existing, replayed: true };
    const reserved = req.admit({
      waiting: req.needs.waiting ? countByPhaseForClient(tx, row.clientId, "waiting") : 0,
      position: req.needs.credit ? creditPosition(tx, row.clientId) : undefined,
      learnedPrice: req.needs.credit && row.priceKey ? findLearnedPrice(tx, row.priceKey) : null,
    });
    const task = insertTaskPrepared(db, { ...row, pointsReserved: reserved });
    applyCreditChange(tx, row.clientId, row.id, { charged: 0, refunded: 0, reserved }, row.createdAt);
    return { task, replayed: false };
  }
}

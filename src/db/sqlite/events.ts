import type { EventStore } from "../../store/store.js";
import { countRetryingEvents } from "../dashboard.js";
import {
  claimDueEvents,
  clientSeqAtOrBefore,
  findEvent,
  insertAttempt,
  lastEventOfTask,
  lastEventsOfTasks,
  listClientEvents,
  listTaskAttempts,
  nextEventDueAt,
  postponeKeyEvents,
  claimTrialEvent,
  claimKeyEvents,
  leasedOfKey,
  retryKeyEventsNow,
  pendingEventsOfKey,
  requeueFailedEvents,
  updateEvent,
  updateLeasedEvent,
} from "../events.js";
import { listTaskEvents } from "../support.js";
import type { SqliteContext } from "./context.js";

/** What hands a lease back with a write. */
const RELEASED = { claimToken: null, claimedUntil: null } as const;

/** The EventStore on SQLite: the outbox, claims under the per-key cap, attempts, trials, re-queues and the feed. */
export function sqliteEvents(s: SqliteContext): EventStore {
  const db = s.database.db;
  return {
    // Claims share the attempt records' group commit (one fsync for everything settling and starting
    // in a turn); each is one UPDATE after its reads, so atomic without a savepoint.
    claimDue: (o) => s.attemptCommits.runAtomic(() => claimDueEvents(db, o)),
    nextDueAt: async (o) => nextEventDueAt(db, o),
    recordAttempt: (eventId, token, attempt, patch) =>
      // Prepared statements on the database run inside the group commit's open transaction.
      s.attemptCommits.run(() => {
        insertAttempt(db, attempt);
        updateLeasedEvent(db, eventId, token, { ...patch, ...RELEASED });
      }),
    release: async (eventId, token, patch) => {
      updateLeasedEvent(db, eventId, token, { ...patch, ...RELEASED });
    },
    postponeKey: async (clientId, host, until, now) => postponeKeyEvents(db, clientId, host, until, now),
    claimTrial: async (key, o) => claimTrialEvent(db, key, o),
    // As on PostgreSQL: the key's leased events count against maxPerKey (also a CLI or a second process's leases).
    claimOfKey: (key, o) =>
      s.attemptCommits.runAtomic(() =>
        claimKeyEvents(db, key, { ...o, limit: Math.min(o.limit, o.maxPerKey - leasedOfKey(db, key, o.now)) }),
      ),
    retryKeyNow: async (key, now) => retryKeyEventsNow(db, key, now),
    pendingOfKey: async (key) => pendingEventsOfKey(db, key),
    requeueLastOfTask: async (taskId, round) =>
      db.transaction((tx) => {
        const event = lastEventOfTask(tx, taskId);
        return event ? updateEvent(tx, event.id, round) : undefined;
      }),
    requeueFailed: async (clientId, since, round) => requeueFailedEvents(db, clientId, since, round),
    retryingOfClient: async (clientId) => countRetryingEvents(db, clientId),
    find: async (id) => findEvent(db, id),
    lastOfTask: async (taskId) => lastEventOfTask(db, taskId),
    lastOfTasks: async (taskIds) => lastEventsOfTasks(db, taskIds),
    ofTask: async (taskId) => listTaskEvents(db, taskId),
    attemptsOfTask: async (taskId) => listTaskAttempts(db, taskId),
    feed: async (clientId, afterPos, limit) => listClientEvents(db, clientId, afterPos, limit),
    clientSeqAtOrBefore: async (clientId, seq) => clientSeqAtOrBefore(db, clientId, seq),
  };
}

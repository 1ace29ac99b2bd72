import type { Clock } from "../clock.js";
import type { TaskStatus } from "../db/schema.js";
import { findTask, updateLeasedTask, type NewTaskRow, type TaskRow } from "../db/tasks.js";
import type { Db } from "../db/open.js";
import type { DbOrTx } from "../db/tx.js";
import type { Nudges } from "../services/deps.js";
import type { UpstreamTask } from "../upstream/types.js";
import { TERMINAL_STATUSES, transitionTask } from "./transition.js";

/** What a task's `error` says: the upstream's code, message and request id, and its details when it gave any. */
export interface TaskError {
  code: string;
  message: string;
  request_id: string | null;
  details?: unknown;
}

export interface LifecycleDeps {
  db: Db;
  clock: Clock;
  nudges: Nudges;
  /** Delay before an event's first delivery attempt (the first entry of WEBHOOK_RETRY_SCHEDULE). */
  firstAttemptDelayMs: number;
  /** Told how long each succeeded task ran, for adaptive polling. */
  onSucceeded?: (task: TaskRow, durationMs: number) => void;
}

const released = { claimToken: null, claimedUntil: null } as const;

/** Whether a waiting task may go upstream now (services/credits decides; the lifecycle acts on it). */
export type SubmissionVerdict = { kind: "go"; reserve: number } | { kind: "wait" } | { kind: "refuse"; message: string } | { kind: "revoked" };

export type BeginResult = { kind: "go"; task: TaskRow } | { kind: "wait" } | { kind: "ended"; task: TaskRow } | { kind: "lost" };

/**
 * The one mapping from what the upstream showed to a patch of our row. Status never moves
 * backwards (a stale page or read saying "queued" for a task already processing changes nothing,
 * and an unknown status is no change); usage is taken where given; a terminal status ends the task.
 */
export function observedPatch(task: TaskRow, remote: UpstreamTask, now: number): Partial<NewTaskRow> {
  const status: TaskStatus = remote.status === null || (remote.status === "queued" && task.status === "processing") ? task.status : remote.status;
  const patch: Partial<NewTaskRow> = {
    status,
    pointsCharged: remote.usage.pointsCharged ?? task.pointsCharged,
    pointsRefunded: remote.usage.pointsRefunded ?? task.pointsRefunded,
    updatedAt: status !== task.status ? now : task.updatedAt,
  };
  if (TERMINAL_STATUSES.has(status)) {
    Object.assign(patch, {
      phase: "done",
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
      outputJson: remote.output === null || remote.output === undefined ? null : JSON.stringify(remote.output),
      errorJson: remote.error ? JSON.stringify(remote.error) : null,
    });
  }
  return patch;
}

/**
 * Every state change of a task, as named verbs. Each is one transaction (through transitionTask:
 * status, credits, outbox event, lease release together), guarded by the caller's lease where it
 * holds one, and wakes the workers the change concerns. Workers claim, call out, and call one verb.
 */
export class Lifecycle {
  constructor(private readonly deps: LifecycleDeps) {}

  private apply(task: TaskRow, patch: Partial<NewTaskRow>, token: string | null, db: DbOrTx = this.deps.db): TaskRow | undefined {
    const { clock, nudges, firstAttemptDelayMs } = this.deps;
    const now = clock.now();
    const updated = transitionTask(db, task, patch, { now, token, firstAttemptDelayMs });
    if (!updated) return undefined;
    if (updated.status !== task.status) nudges.dispatcher();
    if (updated.phase === "done" && task.phase !== "done") {
      // A running task ended (room on the account), or credits were released: waiting tasks may go.
      nudges.submitter();
      if (updated.status === "succeeded" && updated.submittedAt !== null) this.deps.onSucceeded?.(updated, now - updated.submittedAt);
    } else if (updated.pointsCharged !== task.pointsCharged || updated.pointsRefunded !== task.pointsRefunded) {
      nudges.submitter();
    }
    return updated;
  }

  /** The upstream accepted the submission (or replayed it): the task is in flight, or already ended. */
  recordSubmission(task: TaskRow, token: string, remote: UpstreamTask, firstPollAt: number): TaskRow | undefined {
    const now = this.deps.clock.now();
    const patch = observedPatch(task, remote, now);
    const terminal = patch.phase === "done";
    const updated = this.apply(
      task,
      {
        ...patch,
        upstreamTaskId: remote.id,
        phase: terminal ? "done" : "submitted",
        submittedAt: task.submittedAt ?? now,
        updatedAt: now,
        nextRunAt: terminal ? null : firstPollAt,
        conflictSince: null,
        ...released,
      },
      token,
    );
    if (updated) this.deps.nudges.poller();
    return updated;
  }

  /** A read (single or list) showed the task; `nextRunAt` is when to look again if it goes on. */
  recordObservation(task: TaskRow, token: string, remote: UpstreamTask, nextRunAt: number): TaskRow | undefined {
    const now = this.deps.clock.now();
    const patch = observedPatch(task, remote, now);
    return this.apply(task, { ...patch, pollCount: task.pollCount + 1, ...(patch.phase === "done" ? {} : { nextRunAt }), ...released }, token);
  }

  /** Nothing changed, look again at `at` (a transient failure, a wait for room or credits); `patch` carries counters. */
  retryLater(
    task: TaskRow,
    token: string,
    at: number | null,
    patch: Partial<Pick<NewTaskRow, "pollCount" | "submitAttempts" | "conflictSince" | "pointsReserved">> = {},
  ): void {
    const next = { ...patch, ...(at === null ? {} : { nextRunAt: at }), ...released };
    // A changed reservation must reach the client's books: only then through the full transition.
    if (patch.pointsReserved !== undefined) this.apply(task, next, token);
    else updateLeasedTask(this.deps.db, task.id, token, next);
  }

  /** Hands the lease back untouched. */
  release(task: TaskRow, token: string): void {
    updateLeasedTask(this.deps.db, task.id, token, released);
  }

  /**
   * Before the upstream call, in one transaction: asks `decide` (the credit budget, revocation)
   * whether the task may go; if so counts the attempt and holds its reservation. From then on the
   * task may exist upstream, so it can no longer be canceled. Otherwise it waits (lease released,
   * looked at again at `waitUntil` or when nudged), or ends without ever being submitted.
   */
  beginSubmission(task: TaskRow, token: string, decide: (db: DbOrTx, current: TaskRow) => SubmissionVerdict, waitUntil: number): BeginResult {
    return this.deps.db.transaction((tx): BeginResult => {
      const current = findTask(tx, task.id);
      if (!current || current.claimToken !== token) return { kind: "lost" };
      const verdict = decide(tx, current);
      const now = this.deps.clock.now();
      if (verdict.kind === "go") {
        const marked = transitionTask(tx, current, { submitAttempts: current.submitAttempts + 1, pointsReserved: verdict.reserve }, { now, token });
        return marked ? { kind: "go", task: marked } : { kind: "lost" };
      }
      if (verdict.kind === "wait") {
        updateLeasedTask(tx, current.id, token, { nextRunAt: waitUntil, ...released });
        return { kind: "wait" };
      }
      const ended =
        verdict.kind === "refuse"
          ? this.apply(current, this.refusalPatch(now, verdict.message), token, tx)
          : this.apply(current, this.cancelPatch(now, { code: "client_revoked", message: "The API key that created this task was revoked before it was submitted; it was never charged.", request_id: null }), token, tx);
      return ended ? { kind: "ended", task: ended } : { kind: "lost" };
    });
  }

  /** Ends the task failed with `error`; `usage` as known (never invented). */
  fail(task: TaskRow, token: string | null, error: TaskError): TaskRow | undefined {
    const now = this.deps.clock.now();
    return this.apply(task, { status: "failed", phase: "done", errorJson: JSON.stringify(error), completedAt: now, updatedAt: now, nextRunAt: null, ...released }, token);
  }

  /**
   * Ends a task that was never offered upstream as canceled: nothing was or will be charged.
   * `error` says why when the caller did not ask for it (expiry, revocation).
   */
  cancel(task: TaskRow, token: string | null, error: TaskError | null = null, db: DbOrTx = this.deps.db): TaskRow | undefined {
    return this.apply(task, this.cancelPatch(this.deps.clock.now(), error), token, db);
  }

  private cancelPatch(now: number, error: TaskError | null): Partial<NewTaskRow> {
    return {
      status: "canceled",
      phase: "done",
      pointsCharged: 0,
      pointsRefunded: 0,
      errorJson: error ? JSON.stringify(error) : null,
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
      ...released,
    };
  }

  /** A waiting task that cannot fit its client's credit limit: failed, never submitted, never charged. */
  private refusalPatch(now: number, message: string): Partial<NewTaskRow> {
    const error: TaskError = { code: "insufficient_points", message, request_id: null };
    return { ...this.cancelPatch(now, error), status: "failed" };
  }
}

import type { Clock } from "../clock.js";
import type { TaskStatus } from "../statuses.js";
import type { Store, SubmissionContext, SubmissionStep } from "../store/store.js";
import type { NewTaskRow, TaskRow } from "../store/rows.js";
import type { Nudges } from "./nudges.js";
import { type HeldPieces, jsonTextOf, longPiecesOf } from "../upstream/json-text.js";
import type { UpstreamTask } from "../upstream/types.js";
import { TERMINAL_STATUSES } from "./transition.js";
import { keepLongOutputApart, type OutputPatch } from "./stored-output.js";

/** What a task's `error` says: the upstream's code, message and request id, and its details when it gave any. */
export interface TaskError {
  code: string;
  message: string;
  request_id: string | null;
  details?: unknown;
}

export interface LifecycleDeps {
  store: Store;
  clock: Clock;
  nudges: Nudges;
  /** Delay before an event's first delivery attempt (the first entry of WEBHOOK_RETRY_SCHEDULE). */
  firstAttemptDelayMs: number;
  /** Told how long each succeeded task ran, for adaptive polling. */
  onSucceeded?: (task: TaskRow, durationMs: number) => Promise<void> | void;
  /**
   * Whether a success's output is to be copied into the client's bucket first (docs/contract.md, "Outputs"): then the
   * task stays processing in phase `mirroring`, and task.succeeded is written when the copies are made.
   * `output`: its text, or a long output's pieces as the parse worker cut them (never joined whole here).
   */
  mirrors?: (task: TaskRow, output: string | readonly string[] | HeldPieces | null) => Promise<boolean>;
  /**
   * Told of every recorded transition, after its commit: requests held by Prefer: wait on this task
   * are woken by it (core/task-waiters.ts). Other instances learn of it through the store's notification.
   */
  onTransition?: (task: TaskRow) => void;
  /** The median duration of a task's model, or null while unknown: a task.processing event carries its estimated end. */
  expectedDuration?: (task: TaskRow) => Promise<number | null>;
}

const released = { claimToken: null, claimedUntil: null } as const;

/** Whether a waiting task may go upstream now (core/credits decides; the lifecycle acts on it). */
export type SubmissionVerdict =
  | { kind: "go"; reserve: number }
  | { kind: "wait" }
  | { kind: "refuse"; message: string }
  | { kind: "revoked" };

export type BeginResult =
  | { kind: "go"; task: TaskRow }
  | { kind: "wait"; task: TaskRow }
  | { kind: "ended"; task: TaskRow }
  | { kind: "lost" };

/**
 * Whether the upstream shows the task ended while no trustworthy charge is known for it (none read
 * so far, none in this answer): lists and creation answers may carry no usage, so one single read
 * must look for it before the task is finished (docs/contract.md, "Upstream answers").
 */
export function awaitsCharge(task: Pick<TaskRow, "pointsCharged">, remote: UpstreamTask): boolean {
  return (
    remote.status !== null &&
    TERMINAL_STATUSES.has(remote.status) &&
    remote.usage.pointsCharged === null &&
    task.pointsCharged === null
  );
}

/**
 * What a task that ends without a trustworthy charge is charged: its reservation stands (a charge
 * is never read as "free"). `priceKey: ""` because a reservation teaches no price. A task that
 * held nothing (no credit limit, no known price) keeps its charge unknown (null).
 */
export function standingCharge(task: Pick<TaskRow, "pointsCharged" | "pointsReserved">): Partial<NewTaskRow> {
  if (task.pointsCharged !== null) return {};
  return task.pointsReserved > 0 ? { pointsCharged: task.pointsReserved, priceKey: "" } : {};
}

/**
 * The one mapping from what the upstream showed to a patch of our row. Status never moves
 * backwards (a stale page or read saying "queued" for a task already processing changes nothing,
 * and an unknown status is no change); usage is taken where given (only values parse.ts trusts);
 * a terminal status ends the task. `final` false (a list item, a creation answer): a task that
 * ended without a charge is not ended by it, a single read must look for the charge first (see
 * awaitsCharge); `final` true (that single read): it ends, its reservation standing as its charge.
 */
export function observedPatch(task: TaskRow, remote: UpstreamTask, now: number, final = true): OutputPatch {
  const waitForCharge = !final && awaitsCharge(task, remote);
  const status: TaskStatus =
    remote.status === null || waitForCharge || (remote.status === "queued" && task.status === "processing")
      ? task.status
      : remote.status;
  const charged = remote.usage.pointsCharged ?? task.pointsCharged;
  const refunded = remote.usage.pointsRefunded ?? task.pointsRefunded;
  const patch: OutputPatch = {
    status,
    pointsCharged: charged,
    // A refund never exceeds the charge it refunds (credit limits hold whatever the upstream says).
    pointsRefunded: refunded === null || charged === null ? task.pointsRefunded : Math.min(refunded, charged),
    updatedAt: status !== task.status ? now : task.updatedAt,
  };
  if (TERMINAL_STATUSES.has(status)) {
    const longOutput = longPiecesOf(remote.output);
    if (charged === null) Object.assign(patch, standingCharge(task));
    Object.assign(patch, {
      phase: "done",
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
      // A large output arrives as its text (upstream/json-offload.ts) and is stored as it is; a long
      // one in the pieces it is stored in (core/stored-output.ts).
      outputJson: longOutput ? null : jsonTextOf(remote.output),
      errorJson: remote.error ? JSON.stringify(remote.error) : null,
    });
    if (longOutput) patch.longOutput = longOutput;
  }
  return patch;
}

/**
 * Every state change of a task, as named verbs. Each is one transaction (TaskStore.transition:
 * status, credits, outbox event, lease release together), guarded by the caller's lease where it
 * holds one, and wakes the workers the change concerns. Workers claim, call out, and call one verb.
 */
export class Lifecycle {
  constructor(private readonly deps: LifecycleDeps) {}

  private options(token: string | null) {
    return { now: this.deps.clock.now(), token, firstAttemptDelayMs: this.deps.firstAttemptDelayMs };
  }

  /** `asLeased`: `task` is the row as `token` claimed or last wrote it (TransitionOptions.asLeased). */
  private async apply(
    task: TaskRow,
    patch: OutputPatch,
    token: string | null,
    asLeased = false,
  ): Promise<TaskRow | undefined> {
    const starts = patch.status === "processing" && task.status !== "processing" && this.deps.expectedDuration;
    const opts = {
      ...this.options(token),
      expectedDurationMs: starts ? await this.deps.expectedDuration!(task) : null,
      asLeased,
    };
    // A long output is written in pieces before the transition that refers to it (core/stored-output.ts).
    const planned = await keepLongOutputApart(
      this.deps.store.outputs,
      await this.mirrorFirst(task, patch, opts.now),
      opts.now,
    );
    const updated = await this.deps.store.tasks.transition(task, planned, opts);
    if (!updated) return undefined;
    await this.changed(task, updated, opts.now);
    return updated;
  }

  /** Wakes the workers a change concerns, and tells the duration stats about a success. */
  private async changed(task: TaskRow, updated: TaskRow, now: number): Promise<void> {
    const { nudges } = this.deps;
    if (updated.status !== task.status || updated.phase !== task.phase) this.deps.onTransition?.(updated);
    if (updated.status !== task.status) nudges.dispatcher();
    if (updated.phase === "mirroring" && task.phase !== "mirroring") nudges.mirror?.();
    const ended = (phase: string) => phase === "done" || phase === "mirroring";
    if (ended(updated.phase) && !ended(task.phase)) {
      // A running task ended (room on the account), or credits were released: waiting tasks may go.
      nudges.submitter();
      const succeeded = updated.status === "succeeded" || updated.phase === "mirroring";
      if (succeeded && updated.submittedAt !== null) await this.deps.onSucceeded?.(updated, now - updated.submittedAt);
    } else if (updated.pointsCharged !== task.pointsCharged || updated.pointsRefunded !== task.pointsRefunded) {
      nudges.submitter();
    }
  }

  /**
   * The upstream accepted the submission (or replayed it): the task is in flight, or already ended.
   * `task`: the row as beginSubmission left it under `token` (the store starts from it, no read).
   */
  async recordSubmission(
    task: TaskRow,
    token: string,
    remote: UpstreamTask,
    firstPollAt: number,
  ): Promise<TaskRow | undefined> {
    const now = this.deps.clock.now();
    const patch = observedPatch(task, remote, now, false);
    const terminal = patch.phase === "done";
    const updated = await this.apply(
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
      true,
    );
    if (updated) this.deps.nudges.poller();
    return updated;
  }

  /**
   * A read showed the task; `nextRunAt` is when to look again if it goes on. `final`: a single read
   * (see observedPatch); a list item that shows the task ended without a charge does not end it.
   * `task`: the row as claimed under `token` (the store starts from it, no read).
   */
  recordObservation(
    task: TaskRow,
    token: string,
    remote: UpstreamTask,
    nextRunAt: number,
    final = true,
  ): Promise<TaskRow | undefined> {
    const now = this.deps.clock.now();
    const patch = observedPatch(task, remote, now, final);
    return this.apply(
      task,
      { ...patch, pollCount: task.pollCount + 1, ...(patch.phase === "done" ? {} : { nextRunAt }), ...released },
      token,
      true,
    );
  }

  /** Nothing changed, look again at `at` (a transient failure, a wait for room or credits); `patch` carries counters. */
  async retryLater(
    task: TaskRow,
    token: string,
    at: number | null,
    patch: Partial<Pick<NewTaskRow, "pollCount" | "submitAttempts" | "conflictSince" | "pointsReserved">> = {},
  ): Promise<void> {
    const next = { ...patch, ...(at === null ? {} : { nextRunAt: at }), ...released };
    // A changed reservation must reach the client's books: only then through the full transition.
    if (patch.pointsReserved !== undefined) await this.apply(task, next, token);
    else await this.deps.store.tasks.reschedule(task.id, token, next);
  }

  /**
   * A success whose output goes to the client's bucket first: the task stays processing, in phase
   * mirroring (due now for the mirror worker), and no task.succeeded is written yet; finishMirroring
   * writes it with the files. Any other change passes as it is.
   */
  private async mirrorFirst(task: TaskRow, patch: OutputPatch, now: number): Promise<OutputPatch> {
    if (patch.status !== "succeeded" || patch.phase !== "done" || task.phase === "mirroring" || !this.deps.mirrors)
      return patch;
    // A long output is handed over in its pieces: the scan joins only the first ones it needs.
    const output = patch.longOutput ?? patch.outputJson ?? task.outputJson;
    if (!(await this.deps.mirrors(task, output))) return patch;
    return { ...patch, status: "processing", phase: "mirroring", completedAt: null, nextRunAt: now, filesJson: null };
  }

  /** The output's copies are made, or given up on (`files` says which): the task succeeds and task.succeeded is written, with them. */
  finishMirroring(task: TaskRow, token: string, filesJson: string): Promise<TaskRow | undefined> {
    const now = this.deps.clock.now();
    return this.apply(
      task,
      { status: "succeeded", phase: "done", filesJson, completedAt: now, updatedAt: now, nextRunAt: null, ...released },
      token,
    );
  }

  /** Copies to try again at `at`; `progressJson` keeps the ones made, so a retry (or a restart) skips them. */
  async mirrorLater(task: TaskRow, token: string, at: number, progressJson: string): Promise<void> {
    await this.deps.store.tasks.reschedule(task.id, token, { filesJson: progressJson, nextRunAt: at, ...released });
  }

  /** Keeps a copy's lease while it runs (a large file outlasts one lease); `progressJson` as far as it got. False: the lease was lost. */
  async holdMirror(task: TaskRow, token: string, until: number, progressJson?: string): Promise<boolean> {
    const patch: Partial<NewTaskRow> = {
      claimedUntil: until,
      ...(progressJson === undefined ? {} : { filesJson: progressJson }),
    };
    return (await this.deps.store.tasks.reschedule(task.id, token, patch)) !== undefined;
  }

  /** Hands the lease back untouched. */
  async release(task: TaskRow, token: string): Promise<void> {
    await this.deps.store.tasks.reschedule(task.id, token, released);
  }

  /**
   * Before the upstream call, in one transaction: asks `decide` (the credit budget, revocation)
   * whether the task may go; if so counts the attempt and holds its reservation. From then on the
   * task may exist upstream, so it can no longer be canceled. Otherwise it waits (lease released,
   * looked at again at `waitUntil` or when nudged), or ends without ever being submitted.
   */
  async beginSubmission(
    task: TaskRow,
    token: string,
    decide: (ctx: SubmissionContext) => SubmissionVerdict,
    waitUntil: number,
  ): Promise<BeginResult> {
    const opts = this.options(token);
    const step = (ctx: SubmissionContext): SubmissionStep<"go" | "wait" | "ended"> => {
      const { task: current } = ctx;
      const verdict = decide(ctx);
      if (verdict.kind === "go")
        return {
          kind: "go",
          transition: true,
          patch: { submitAttempts: current.submitAttempts + 1, pointsReserved: verdict.reserve },
        };
      if (verdict.kind === "wait")
        return { kind: "wait", transition: false, patch: { nextRunAt: waitUntil, ...released } };
      const patch =
        verdict.kind === "refuse"
          ? this.refusalPatch(opts.now, verdict.message)
          : this.cancelPatch(opts.now, {
              code: "client_revoked",
              message: "The API key that created this task was revoked before it was submitted; it was never charged.",
              request_id: null,
            });
      return { kind: "ended", transition: true, patch };
    };
    const before = task;
    const result = await this.deps.store.tasks.beginSubmission(task.id, token, step, opts);
    if (!result) return { kind: "lost" };
    if (result.kind === "ended") await this.changed(before, result.task, opts.now);
    return result;
  }

  /** Ends the task failed with `error`; `usage` as known (never invented). */
  fail(task: TaskRow, token: string | null, error: TaskError): Promise<TaskRow | undefined> {
    const now = this.deps.clock.now();
    return this.apply(
      task,
      {
        status: "failed",
        phase: "done",
        errorJson: JSON.stringify(error),
        completedAt: now,
        updatedAt: now,
        nextRunAt: null,
        ...released,
      },
      token,
    );
  }

  /**
   * Ends failed a task the upstream accepted (and may have charged) but whose answers the relay
   * cannot use: an id bound to another task, an id or body it cannot hold. Its reservation stands
   * as its charge unless a charge was read; no output is ever attached.
   */
  failUnusable(task: TaskRow, token: string | null, error: TaskError): Promise<TaskRow | undefined> {
    const now = this.deps.clock.now();
    const patch: Partial<NewTaskRow> = {
      status: "failed",
      phase: "done",
      errorJson: JSON.stringify(error),
      outputJson: null,
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
    };
    return this.apply(task, { ...patch, ...standingCharge(task), ...released }, token);
  }

  /** The relay task other than `task` that the upstream id is already bound to on its account, if any. */
  async boundElsewhere(task: TaskRow, upstreamTaskId: string): Promise<TaskRow | undefined> {
    const bound = await this.deps.store.tasks.findByUpstreamId(task.upstreamAccount, upstreamTaskId);
    return bound && bound.id !== task.id ? bound : undefined;
  }

  /**
   * Ends a task that was never offered upstream as canceled: nothing was or will be charged.
   * `error` says why when the caller did not ask for it (expiry, revocation).
   */
  cancel(task: TaskRow, token: string | null, error: TaskError | null = null): Promise<TaskRow | undefined> {
    return this.apply(task, this.cancelPatch(this.deps.clock.now(), error), token);
  }

  /**
   * Cancels a task (on request: the API, the dashboard, an operator; or on revocation) when
   * `allowed` says so for the task as it is now, read in the same transaction; `allowed` may throw
   * to refuse. `clientId` null: any client's task. Undefined when there is no such task; the task
   * unchanged when `allowed` said no.
   */
  async cancelIf(
    id: string,
    clientId: string | null,
    allowed: (task: TaskRow, now: number) => boolean,
    error: TaskError | null = null,
  ): Promise<TaskRow | undefined> {
    const opts = this.options(null);
    const result = await this.deps.store.tasks.decideAndTransition(
      id,
      clientId,
      (task) => (allowed(task, opts.now) ? this.cancelPatch(opts.now, error) : null),
      opts,
    );
    if (!result) return undefined;
    if (result.after !== result.before) await this.changed(result.before, result.after, opts.now);
    return result.after;
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

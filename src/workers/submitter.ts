import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { Metrics } from "../metrics.js";
import type { Db } from "../db/open.js";
import { updateClient } from "../db/clients.js";
import { getAccountState, upsertAccountState } from "../db/upstream.js";
import { accountsWithDueTasks, claimExpiredWaiting, countRunning, nextDueAt, nextExpiryAt, updateLeasedTask, type TaskRow } from "../db/tasks.js";
import type { Nudges } from "../services/deps.js";
import { TERMINAL_STATUSES, transitionTask } from "../services/transitions.js";
import type { UpstreamAccounts } from "../services/upstream-accounts.js";
import { UpstreamError, isConcurrentLimit } from "../upstream/errors.js";
import { claimFairly } from "./admission.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";
import { firstPollDelay } from "./poll-schedule.js";

export interface SubmitterOptions {
  db: Db;
  clock: Clock;
  config: Config;
  logger: Logger;
  accounts: UpstreamAccounts;
  owner: LeaseOwner;
  nudges: Nudges;
  /** Submissions in flight at once per tick. */
  batchSize?: number;
  metrics?: Metrics | undefined;
}

/** After this long failing to reach the upstream, a task ends failed instead of retrying forever. */
const GIVE_UP_AFTER_MS = 24 * 60 * 60 * 1000;
/** A learned concurrency limit is re-probed after this long (other apps on the account may have finished). */
const LEARNED_LIMIT_TTL_MS = 10 * 60 * 1000;
/** A task blocked by concurrency is looked at again at least this often, even without a nudge. */
const BLOCKED_RECHECK_MS = 30_000;
/** Retries of a 409 idempotency_key_reused at submission before it is taken as final. */
const CONFLICT_RETRIES = 3;
/** A claim outlasts the upstream request it covers, so a live worker never loses its lease mid-call. */
const LEASE_MARGIN_MS = 5_000;

export function submitBackoffMs(attempt: number): number {
  return Math.min(5 * 60_000, 1_000 * 2 ** Math.max(0, attempt - 1));
}

/**
 * Sends waiting tasks upstream with their fixed Idempotency-Key, within each account's concurrency,
 * taking clients in turn. Every outcome is recorded under the claim's lease.
 */
export class Submitter {
  constructor(private readonly opts: SubmitterOptions) {}

  /**
   * Concurrency cap of an account now: the configured cap, lowered by what a recent 429
   * concurrent_limit taught (other apps may share the account), else none.
   */
  capacity(account: string): number {
    const configured = this.opts.config.upstreamMaxConcurrent ?? Number.POSITIVE_INFINITY;
    const state = getAccountState(this.opts.db, account);
    if (state?.learnedMaxConcurrent && state.learnedAt && this.opts.clock.now() - state.learnedAt < LEARNED_LIMIT_TTL_MS) {
      return Math.min(configured, state.learnedMaxConcurrent);
    }
    return configured;
  }

  async runOnce(): Promise<TickResult> {
    const { db, clock } = this.opts;
    const now = clock.now();
    let didWork = false;
    // Earliest time an account skipped below (paused or full) may go again.
    let wake: number | null = null;
    const later = (at: number) => {
      wake = wake === null ? at : Math.min(wake, at);
    };
    // Expiry first, whatever the account's capacity or pause: a held-back task must not outlive its deadline.
    const expired = claimExpiredWaiting(db, { now, leaseMs: this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS, token: this.opts.owner.token(), limit: 100 });
    for (const task of expired) this.expire(task);
    if (expired.length > 0) didWork = true;
    for (const account of accountsWithDueTasks(db, "waiting", now)) {
      const state = getAccountState(db, account);
      if (state?.submitPausedUntil && state.submitPausedUntil > now) {
        later(state.submitPausedUntil);
        continue;
      }
      const free = this.capacity(account) - countRunning(db, account);
      const limit = Math.min(this.opts.batchSize ?? 16, Math.max(0, free));
      if (limit <= 0) {
        later(now + BLOCKED_RECHECK_MS);
        continue;
      }
      const claimed = claimFairly(db, { account, now, leaseMs: this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS, owner: this.opts.owner, limit });
      if (claimed.length === 0) continue;
      didWork = true;
      for (const task of claimed) this.opts.metrics?.workerLag.observe({ worker: "submitter" }, Math.max(0, now - (task.nextRunAt ?? now)) / 1000);
      await Promise.all(claimed.map((task) => this.submit(task)));
    }
    const due = nextDueAt(db, "waiting", clock.now());
    // Rows still due now belong to a paused or full account: sleep until it may go again instead of spinning.
    let next = !didWork && wake !== null && due !== null && due <= clock.now() ? wake : due;
    const expiry = nextExpiryAt(db);
    if (expiry !== null && expiry > clock.now() && (next === null || expiry < next)) next = expiry;
    return { didWork, nextDueAt: next };
  }

  private expire(task: TaskRow): void {
    const { db, clock, config } = this.opts;
    const now = clock.now();
    transitionTask(db, task, {
      status: "canceled",
      phase: "done",
      pointsCharged: 0,
      pointsRefunded: 0,
      errorJson: JSON.stringify({ code: "expired", message: "The task expired while waiting in the relay; it was never sent upstream.", request_id: null }),
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
      claimToken: null,
      claimedUntil: null,
    }, { now, token: task.claimToken!, firstAttemptDelayMs: config.webhookRetryScheduleMs[0] });
    this.opts.nudges.dispatcher();
  }

  private async submit(task: TaskRow): Promise<void> {
    const { db, clock, logger, config } = this.opts;
    const token = task.claimToken!;
    const now = clock.now();
    // Only a task never offered upstream can expire: after an attempt, the upstream may hold (and charge) it.
    if (task.expiresAt !== null && task.expiresAt <= now && task.submitAttempts === 0) {
      this.expire(task);
      return;
    }
    // Counted before the call: once a request may have reached the upstream, the task can no longer be canceled.
    const marked = updateLeasedTask(db, task.id, token, { submitAttempts: task.submitAttempts + 1 });
    if (!marked) return;
    const log = { task_id: task.id, client_id: task.clientId, account: task.upstreamAccount, attempt: marked.submitAttempts };
    try {
      const result = await this.opts.accounts.get(task.upstreamAccount).createTask(task.type, JSON.parse(task.requestJson) as Record<string, unknown>, task.upstreamIdempotencyKey);
      this.opts.metrics?.upstreamCalls.inc({ endpoint: "create", outcome: "ok" });
      const at = clock.now();
      const status = result.task.status ?? "queued";
      const terminal = TERMINAL_STATUSES.has(status);
      transitionTask(db, marked, {
        upstreamTaskId: result.task.id,
        status,
        phase: terminal ? "done" : "submitted",
        submittedAt: marked.submittedAt ?? at,
        updatedAt: at,
        pointsCharged: result.task.usage.pointsCharged ?? marked.pointsCharged,
        pointsRefunded: result.task.usage.pointsRefunded ?? marked.pointsRefunded,
        ...(terminal
          ? {
              completedAt: at,
              outputJson: result.task.output === null ? null : JSON.stringify(result.task.output),
              // A replay can show a task that already ended: keep why it failed.
              errorJson: result.task.error ? JSON.stringify(result.task.error) : null,
            }
          : {}),
        nextRunAt: terminal ? null : at + firstPollDelay(task.type),
        claimToken: null,
        claimedUntil: null,
      }, { now: at, token, firstAttemptDelayMs: config.webhookRetryScheduleMs[0] });
      updateClient(db, task.clientId, { lastAdmittedAt: at });
      this.opts.nudges.poller();
      if (terminal) this.opts.nudges.dispatcher();
      logger.info({ ...log, upstream_task_id: result.task.id, replayed: result.replayed, outcome: "submitted" }, "submission");
    } catch (err) {
      this.onFailure(marked, token, err, log);
    }
  }

  private onFailure(task: TaskRow, token: string, err: unknown, log: Record<string, unknown>): void {
    const { db, clock, logger, config } = this.opts;
    const now = clock.now();
    const e = err instanceof UpstreamError ? err : null;
    this.opts.metrics?.upstreamCalls.inc({ endpoint: "create", outcome: e?.code ?? "error" });
    if (e !== null && isConcurrentLimit(e as unknown)) {
      this.opts.metrics?.concurrentLimitWaits.inc();
      // Not a failure: the account is full. Remember its size and wait for a running task to end.
      const running = countRunning(db, task.upstreamAccount);
      upsertAccountState(db, task.upstreamAccount, { learnedMaxConcurrent: Math.max(1, running), learnedAt: now }, now);
      // When our own tasks fill the account, the learned capacity holds this one back and the end of one
      // of them nudges us: it keeps its place in line. When none of ours runs (other apps fill the
      // account), nothing will nudge: look again later rather than at once.
      const retry = running > 0 ? {} : { nextRunAt: now + BLOCKED_RECHECK_MS };
      updateLeasedTask(db, task.id, token, { submitAttempts: task.submitAttempts - 1, ...retry, claimToken: null, claimedUntil: null });
      logger.info({ ...log, outcome: "concurrent_limit", running }, "submission");
      return;
    }
    if (e && e.status === 429) {
      const until = now + (e.retryAfterMs ?? 5_000);
      upsertAccountState(db, task.upstreamAccount, { submitPausedUntil: until }, now);
      // Refused outright, so nothing was created upstream: the attempt does not count (the task may still expire or be canceled).
      updateLeasedTask(db, task.id, token, { submitAttempts: task.submitAttempts - 1, nextRunAt: until, claimToken: null, claimedUntil: null });
      logger.warn({ ...log, outcome: "rate_limit", retry_in_ms: until - now }, "submission");
      return;
    }
    // 401 means our own key is wrong, not the caller's request: keep retrying, loudly.
    // A 409 on our own task-derived key means the upstream is still creating the original from an
    // earlier attempt ("retry later", UPSTREAM-API §7): retry a few times with the same key, so a
    // replay can return that task, before ending the task failed as the design asks.
    const conflictRetry = e !== null && e.status === 409 && task.submitAttempts <= CONFLICT_RETRIES;
    const final = e !== null && !e.retryable && e.status !== 401 && !conflictRetry;
    const givingUp = !final && now - task.createdAt > GIVE_UP_AFTER_MS;
    if (final || givingUp) {
      const info = e ? e.toInfo() : { code: "internal_error", message: String(err), request_id: null };
      transitionTask(db, task, {
        status: "failed",
        phase: "done",
        errorJson: JSON.stringify(info),
        completedAt: now,
        updatedAt: now,
        nextRunAt: null,
        claimToken: null,
        claimedUntil: null,
      }, { now, token, firstAttemptDelayMs: config.webhookRetryScheduleMs[0] });
      this.opts.nudges.dispatcher();
      logger.warn({ ...log, outcome: "failed", code: info.code, upstream_status: e?.status }, "submission");
      return;
    }
    const delay = Math.max(submitBackoffMs(task.submitAttempts), e?.retryAfterMs ?? 0);
    updateLeasedTask(db, task.id, token, { nextRunAt: now + delay, claimToken: null, claimedUntil: null });
    const level = e?.status === 401 ? "error" : "warn";
    logger[level]({ ...log, outcome: "retry", code: e?.code ?? "error", retry_in_ms: delay }, "submission");
  }
}

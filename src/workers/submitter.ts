import type { Clock } from "../clock.js";
import { storedContext } from "../telemetry/index.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { Metrics } from "../metrics.js";
import type { Lifecycle } from "../core/lifecycle.js";
import { decideSubmission } from "../core/credits.js";
import {
  accountCapacity,
  admission,
  BLOCKED_RECHECK_MS,
  concurrentLimitPlan,
  expiresUnsent,
  failurePlan,
} from "../core/submit-plan.js";
import type { Store } from "../store/store.js";
import type { TaskRow, UpstreamAccountRow } from "../store/rows.js";
import type { Nudges } from "../core/nudges.js";
import type { UpstreamAccounts } from "../upstream/accounts.js";
import { UpstreamError } from "../upstream/errors.js";
import type { CreateResult } from "../upstream/types.js";
import { isDatabaseUnavailable, isUpstreamIdTaken } from "../store/database-health.js";
import { Leadership, LEADER_RECHECK_MS } from "./leadership.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";
import { firstPollDelay } from "../core/poll-schedule.js";

export interface SubmitterOptions {
  /** Tasks, the accounts' learned state, clients' admissions; and `ops` for leadership. */
  store: Pick<Store, "tasks" | "accounts" | "clients" | "ops">;
  clock: Clock;
  config: Config;
  logger: Logger;
  accounts: UpstreamAccounts;
  owner: LeaseOwner;
  nudges: Nudges;
  lifecycle: Lifecycle;
  /** Which accounts this instance leads (shared with the poller); one is made when absent. */
  leadership?: Leadership;
  /** Submissions in flight at once per tick. */
  batchSize?: number;
  metrics?: Metrics | undefined;
}

/** A claim outlasts the upstream request it covers, so a live worker never loses its lease mid-call. */
const LEASE_MARGIN_MS = 5_000;

/**
 * Sends waiting tasks upstream with their fixed Idempotency-Key, within each account's concurrency,
 * taking clients in turn. Every outcome is recorded under the claim's lease.
 */
export class Submitter {
  private readonly leadership: Leadership;
  /** Accounts the last tick found at their concurrency cap, until when (see isFull). */
  private readonly full = new Map<string, number>();

  constructor(private readonly opts: SubmitterOptions) {
    this.leadership =
      opts.leadership ??
      new Leadership(opts.store, opts.logger, { holder: opts.owner.id, leaseMs: opts.config.leaderLeaseMs });
  }

  /**
   * Concurrency cap of an account now: the configured cap, lowered by what a recent 429
   * concurrent_limit taught (other apps may share the account), else none.
   */
  async capacity(account: string, known?: UpstreamAccountRow | undefined): Promise<number> {
    const state = known ?? (await this.opts.store.accounts.state(account));
    return accountCapacity(this.opts.config.upstreamMaxConcurrent, state, this.opts.clock.now());
  }

  /**
   * Whether the last tick found the account at its cap (and that is recent): a new task of it cannot
   * go before one ends, and a task ending wakes the submitter anyway, so intake's nudge is spared
   * (while an account is full, every creation used to cost a whole tick of queries).
   */
  isFull(account: string): boolean {
    return (this.full.get(account) ?? 0) > this.opts.clock.now();
  }

  async runOnce(): Promise<TickResult> {
    const { store, clock } = this.opts;
    // Planned once per cluster: an instance that leads no account looks for no work (not even
    // expiries); a takeover wakes it (leadership.ts).
    if (!(await this.leadership.plans())) return { didWork: false, nextDueAt: null };
    const now = clock.now();
    this.full.clear();
    let didWork = false;
    // Earliest time an account skipped below (paused or full) may go again.
    let wake: number | null = null;
    const later = (at: number) => {
      wake = wake === null ? at : Math.min(wake, at);
    };
    // Expiry first, whatever the account's capacity or pause: a held-back task must not outlive its deadline.
    // The earliest expiry is one index probe; the claim (an UPDATE) runs only when something is past it.
    const leaseMs = this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS;
    const firstExpiry = await store.tasks.nextExpiryAt();
    if (firstExpiry !== null && firstExpiry <= now) {
      const expired = await store.tasks.claimExpired({ now, leaseMs, token: this.opts.owner.token(), limit: 100 });
      for (const task of expired) await this.expire(task);
      if (expired.length > 0) didWork = true;
    }
    for (const account of await store.tasks.accountsWithDue("waiting", now)) {
      // One submitter per account across instances sharing the store (always this one on SQLite).
      if (!(await this.leadership.leads(account))) {
        later(now + LEADER_RECHECK_MS);
        continue;
      }
      const state = await store.accounts.state(account);
      if (state?.submitPausedUntil && state.submitPausedUntil > now) {
        later(state.submitPausedUntil);
        continue;
      }
      const plan = admission({
        now,
        state,
        capacity: await this.capacity(account, state),
        running: await store.tasks.countRunning(account),
        batchSize: this.opts.batchSize ?? 16,
      });
      if (plan.kind === "paused") {
        later(plan.until);
        continue;
      }
      if (plan.kind === "full") {
        later(plan.recheckAt);
        this.full.set(account, plan.recheckAt);
        continue;
      }
      const limit = plan.limit;
      // Made as the account's leader: nothing is claimed if another instance has taken it meanwhile.
      const claimed = await store.tasks.claimFairly(account, {
        now,
        leaseMs,
        token: this.opts.owner.token(),
        limit,
        fence: this.leadership.fence(account),
      });
      if (claimed.length === 0) continue;
      didWork = true;
      for (const task of claimed)
        this.opts.metrics?.workerLag.observe(
          { worker: "submitter" },
          Math.max(0, now - (task.nextRunAt ?? now)) / 1000,
        );
      await Promise.all(claimed.map((task) => this.submit(task)));
    }
    const due = await store.tasks.nextDueAt("waiting", clock.now());
    // Rows still due now belong to a paused or full account: sleep until it may go again instead of spinning.
    let next = !didWork && wake !== null && due !== null && due <= clock.now() ? wake : due;
    const expiry =
      didWork || firstExpiry === null || firstExpiry <= now ? await store.tasks.nextExpiryAt() : firstExpiry;
    if (expiry !== null && expiry > clock.now() && (next === null || expiry < next)) next = expiry;
    return { didWork, nextDueAt: next };
  }

  private async expire(task: TaskRow): Promise<void> {
    await this.opts.lifecycle.cancel(task, task.claimToken!, {
      code: "expired",
      message: "The task expired while waiting in the relay; it was never sent upstream.",
      request_id: null,
    });
  }

  private async submit(task: TaskRow): Promise<void> {
    const { clock, logger, lifecycle } = this.opts;
    const token = task.claimToken!;
    const now = clock.now();
    // Only a task never offered upstream can expire: after an attempt, the upstream may hold (and charge) it.
    if (expiresUnsent(task, now)) {
      await this.expire(task);
      return;
    }
    const begun = await lifecycle.beginSubmission(task, token, decideSubmission, now + BLOCKED_RECHECK_MS);
    const log = {
      task_id: task.id,
      client_id: task.clientId,
      account: task.upstreamAccount,
      attempt: task.submitAttempts + 1,
    };
    if (begun.kind === "ended")
      logger.info(
        { ...log, outcome: begun.task.status, code: JSON.parse(begun.task.errorJson ?? "{}").code },
        "submission",
      );
    if (begun.kind === "wait") logger.debug({ ...log, outcome: "waiting_for_credits" }, "submission");
    if (begun.kind !== "go") return;
    const marked = begun.task;
    let result: CreateResult;
    try {
      const upstream = await this.opts.accounts.get(task.upstreamAccount);
      result = await upstream.createTask(
        task.type,
        JSON.parse(task.requestJson) as Record<string, unknown>,
        task.upstreamIdempotencyKey,
        storedContext(task),
      );
      this.opts.metrics?.upstreamCalls.inc({ endpoint: "create", outcome: "ok" });
    } catch (err) {
      await this.onFailure(task, marked, token, err, log);
      return;
    }
    // From here the upstream holds the task: whatever goes wrong in our own bookkeeping, it is
    // never offered again as if the call had failed (docs/contract.md, "Upstream answers").
    await this.record(marked, token, result, log);
  }

  /** Binds the task to the upstream's answer: one upstream id, one relay task. */
  private async record(
    task: TaskRow,
    token: string,
    result: CreateResult,
    log: Record<string, unknown>,
  ): Promise<void> {
    const { store, clock, logger, lifecycle } = this.opts;
    const remoteId = result.task.id;
    try {
      // No read of the id's binding first: the write refuses an id bound to another task (below).
      const at = clock.now();
      await lifecycle.recordSubmission(task, token, result.task, at + firstPollDelay(task.type));
      await store.clients.markAdmitted(task.clientId, at);
      logger.info(
        { ...log, upstream_task_id: remoteId, replayed: result.replayed, outcome: "submitted" },
        "submission",
      );
    } catch (err) {
      // Bound to another task (an upstream defect): the unique index on the account's upstream ids
      // refused the write, and nothing of it was kept; the other task is looked up for the log only.
      if (isUpstreamIdTaken(err)) {
        const bound = await lifecycle.boundElsewhere(task, remoteId);
        await this.conflict(task, token, remoteId, bound?.id ?? null, log);
        return;
      }
      // The database is down: nothing can be recorded now. The lease runs out and the task is
      // offered again with its own key, which the upstream answers with the same task (no new one).
      if (isDatabaseUnavailable(err)) throw err;
      // A value our store refused although the reader let it through: a bug of ours, but the task
      // must not be offered again for it. It ends failed, its reservation standing as its charge.
      logger.error(
        { ...log, upstream_task_id: remoteId, outcome: "failed", code: "upstream_invalid_response", err },
        "submission accepted upstream but could not be recorded",
      );
      await lifecycle.failUnusable(task, token, {
        code: "upstream_invalid_response",
        message:
          "The upstream accepted this task but its answer could not be recorded. It may have been charged: check the upstream account.",
        request_id: result.requestId,
      });
    }
  }

  /**
   * The upstream answered this creation with an id already bound to another relay task: an
   * upstream defect. This task ends failed; the other keeps its id, and no client is ever shown the
   * other's output.
   */
  private async conflict(
    task: TaskRow,
    token: string,
    remoteId: string,
    boundTo: string | null,
    log: Record<string, unknown>,
  ): Promise<void> {
    await this.opts.lifecycle.failUnusable(task, token, {
      code: "upstream_conflict",
      message: `The upstream answered this task's creation with task id ${JSON.stringify(remoteId)}, which already belongs to another task of this relay. This is an upstream defect; the task ended without output. It may have been charged: check the upstream account.`,
      request_id: null,
    });
    this.opts.logger.error(
      { ...log, outcome: "failed", code: "upstream_conflict", upstream_task_id: remoteId, bound_to: boundTo },
      "upstream defect: creation answered with an id bound to another task",
    );
  }

  /**
   * @param before the task as claimed, before this attempt was counted and its credits reserved
   * @param task the task as marked for this attempt
   */
  private async onFailure(
    before: TaskRow,
    task: TaskRow,
    token: string,
    err: unknown,
    log: Record<string, unknown>,
  ): Promise<void> {
    const { store, clock, logger, lifecycle } = this.opts;
    const now = clock.now();
    const e = err instanceof UpstreamError ? err : null;
    this.opts.metrics?.upstreamCalls.inc({ endpoint: "create", outcome: e?.code ?? "error" });
    // Refused outright (429), so nothing was created upstream: the attempt and its reservation are
    // undone, and the task may still expire or be canceled.
    const undo = { submitAttempts: before.submitAttempts, pointsReserved: before.pointsReserved };
    const plan = failurePlan(
      e && { status: e.status, code: e.code, retryable: e.retryable, retryAfterMs: e.retryAfterMs },
      task,
      now,
      String(err),
    );
    switch (plan.kind) {
      case "concurrent_limit": {
        this.opts.metrics?.concurrentLimitWaits.inc();
        // Not a failure: the account is full. Remember its size and wait for a running task to end.
        const running = await store.tasks.countRunning(task.upstreamAccount);
        const next = concurrentLimitPlan(running, now);
        await store.accounts.updateState(task.upstreamAccount, next.learned, now);
        await lifecycle.retryLater(task, token, next.retryAt, undo);
        logger.info({ ...log, outcome: "concurrent_limit", running }, "submission");
        return;
      }
      case "rate_limit":
        await store.accounts.updateState(task.upstreamAccount, { submitPausedUntil: plan.until }, now);
        await lifecycle.retryLater(task, token, plan.until, undo);
        logger.warn({ ...log, outcome: "rate_limit", retry_in_ms: plan.until - now }, "submission");
        return;
      case "conflict_retry":
        await lifecycle.retryLater(task, token, plan.at, { conflictSince: plan.conflictSince });
        logger.warn({ ...log, outcome: "retry", code: e?.code, retry_in_ms: plan.delay }, "submission");
        return;
      case "unusable":
        // A 2xx the relay cannot use: the upstream accepted (and may have charged) the task, and
        // every replay of its key brings the same answer. Ended, never offered again.
        await lifecycle.failUnusable(task, token, {
          code: "upstream_invalid_response",
          message: `The upstream accepted this task but its answer cannot be used (${e?.message}). It may have been charged: check the upstream account.`,
          request_id: e?.requestId ?? null,
        });
        logger.error(
          { ...log, outcome: "failed", code: "upstream_invalid_response", cause: e?.code },
          "upstream defect: creation answer unusable",
        );
        return;
      case "refused": {
        // A 4xx refusal (400, 402, 422…): the upstream created nothing and charged nothing.
        const u = e!;
        const info = { ...u.toInfo(), ...(u.details !== undefined ? { details: u.details } : {}) };
        await lifecycle.fail(task, token, info);
        logger.warn({ ...log, outcome: "failed", code: info.code, upstream_status: u.status }, "submission");
        return;
      }
      case "unknown":
        await this.giveUp(task, token, e, log, plan.why);
        return;
      case "retry": {
        await lifecycle.retryLater(task, token, plan.at);
        const level = e?.status === 401 ? "error" : "warn";
        logger[level]({ ...log, outcome: "retry", code: e?.code ?? "error", retry_in_ms: plan.delay }, "submission");
      }
    }
  }

  /**
   * The upstream may hold this task (an attempt may have reached it) but never confirmed it: the
   * task ends failed with a code that says so, rather than pretending nothing was charged.
   */
  private async giveUp(
    task: TaskRow,
    token: string,
    e: UpstreamError | null,
    log: Record<string, unknown>,
    why: string,
  ): Promise<void> {
    await this.opts.lifecycle.fail(task, token, {
      code: "upstream_outcome_unknown",
      message: `The upstream may have created and charged this task, but ${why}. Check the upstream account before retrying.`,
      request_id: e?.requestId ?? null,
      ...(e?.details !== undefined ? { details: e.details } : {}),
    });
    this.opts.logger.warn({ ...log, outcome: "failed", code: "upstream_outcome_unknown" }, "submission");
  }
}

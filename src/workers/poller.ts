import { and, eq, lte } from "drizzle-orm";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { Db } from "../db/open.js";
import { tasks } from "../db/schema.js";
import { claimDueTasks, nextDueAt, updateLeasedTask, type TaskRow } from "../db/tasks.js";
import type { Nudges } from "../services/deps.js";
import { TERMINAL_STATUSES, transitionTask } from "../services/transitions.js";
import type { UpstreamAccounts } from "../services/upstream-accounts.js";
import { UpstreamError } from "../upstream/errors.js";
import type { UpstreamTask } from "../upstream/types.js";
import { DurationStats } from "./duration-stats.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";
import { nextPollDelay } from "./poll-schedule.js";
import type { ReadBudget } from "./read-budget.js";

export interface PollerOptions {
  db: Db;
  clock: Clock;
  config: Config;
  logger: Logger;
  accounts: UpstreamAccounts;
  budget: ReadBudget;
  owner: LeaseOwner;
  nudges: Nudges;
}

/** A claim outlasts the upstream read it covers. */
const LEASE_MARGIN_MS = 5_000;
/** Consecutive 404s before a submitted task is declared lost upstream. */
const NOT_FOUND_LIMIT = 3;

/**
 * Watches submitted tasks within each account's read budget. A read is spent only when the budget
 * has room (ReadBudget.take), so the budget holds whatever the number of tasks in flight; tasks that
 * could not be read stay due and are read first when room returns.
 */
export class Poller {
  readonly durations: DurationStats;
  private readonly notFound = new Map<string, number>();

  constructor(private readonly opts: PollerOptions) {
    this.durations = new DurationStats(opts.db, opts.clock);
  }

  async runOnce(): Promise<TickResult> {
    const { db, clock, budget } = this.opts;
    const now = clock.now();
    let didWork = false;
    let budgetWait: number | null = null;
    const accounts = db
      .selectDistinct({ account: tasks.upstreamAccount })
      .from(tasks)
      .where(and(eq(tasks.phase, "submitted"), lte(tasks.nextRunAt, now)))
      .all()
      .map((r) => r.account);
    for (const account of accounts) {
      const room = budget.available(account);
      if (room <= 0) {
        const at = budget.nextAvailableAt(account);
        budgetWait = budgetWait === null ? at : Math.min(budgetWait, at);
        continue;
      }
      const claimed = claimDueTasks(db, { phase: "submitted", account, now, leaseMs: this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS, token: this.opts.owner.token(), limit: Math.min(room, 25) });
      if (claimed.length > 0) didWork = true;
      await Promise.all(claimed.map((task) => this.readOne(task)));
    }
    const due = nextDueAt(db, "submitted");
    let next = due;
    if (budgetWait !== null && (next === null || next <= clock.now())) next = budgetWait;
    return { didWork, nextDueAt: next };
  }

  private async readOne(task: TaskRow): Promise<void> {
    const { db, clock, budget, logger } = this.opts;
    const token = task.claimToken!;
    if (!budget.take(task.upstreamAccount)) {
      updateLeasedTask(db, task.id, token, { claimToken: null, claimedUntil: null });
      return;
    }
    try {
      const remote = await this.opts.accounts.get(task.upstreamAccount).getTask(task.upstreamTaskId!);
      this.notFound.delete(task.id);
      this.apply(task, token, remote);
    } catch (err) {
      const now = clock.now();
      const e = err instanceof UpstreamError ? err : null;
      const log = { task_id: task.id, upstream_task_id: task.upstreamTaskId, account: task.upstreamAccount, code: e?.code ?? String(err) };
      if (e?.status === 429) {
        const until = now + (e.retryAfterMs ?? 10_000);
        budget.pause(task.upstreamAccount, until);
        updateLeasedTask(db, task.id, token, { nextRunAt: until, claimToken: null, claimedUntil: null });
        logger.warn({ ...log, retry_in_ms: until - now }, "upstream read limited; pausing reads for this account");
        return;
      }
      if (e?.status === 404) {
        const count = (this.notFound.get(task.id) ?? 0) + 1;
        this.notFound.set(task.id, count);
        if (count >= NOT_FOUND_LIMIT) {
          this.notFound.delete(task.id);
          this.finish(task, token, { status: "failed", errorJson: JSON.stringify(e.toInfo()) });
          logger.warn(log, "upstream no longer knows the task; ending it failed");
          return;
        }
      }
      const delay = Math.min(60_000, 2_000 * 2 ** Math.min(task.pollCount, 5));
      updateLeasedTask(db, task.id, token, { pollCount: task.pollCount + 1, nextRunAt: now + delay, claimToken: null, claimedUntil: null });
      logger.warn({ ...log, retry_in_ms: delay }, "upstream read failed");
    }
  }

  /** Applies what a read showed: a state change (with its event) and the next read's time. */
  apply(task: TaskRow, token: string, remote: UpstreamTask): void {
    const now = this.opts.clock.now();
    const status = remote.status ?? task.status;
    const usage = {
      pointsCharged: remote.usage.pointsCharged ?? task.pointsCharged,
      pointsRefunded: remote.usage.pointsRefunded ?? task.pointsRefunded,
    };
    if (TERMINAL_STATUSES.has(status)) {
      this.finish(task, token, {
        status,
        ...usage,
        outputJson: remote.output === null || remote.output === undefined ? null : JSON.stringify(remote.output),
        errorJson: remote.error ? JSON.stringify(remote.error) : null,
      });
      return;
    }
    const age = now - (task.submittedAt ?? task.createdAt);
    const delay = nextPollDelay(task.type, age, this.durations.expected(task.type, task.model));
    transitionTask(
      this.opts.db,
      task,
      { status, ...usage, updatedAt: status !== task.status ? now : task.updatedAt, pollCount: task.pollCount + 1, nextRunAt: now + delay, claimToken: null, claimedUntil: null },
      { now, token, firstAttemptDelayMs: this.opts.config.webhookRetryScheduleMs[0] },
    );
    if (status !== task.status) this.opts.nudges.dispatcher();
  }

  private finish(task: TaskRow, token: string, patch: Parameters<typeof transitionTask>[2]): void {
    const now = this.opts.clock.now();
    const done = transitionTask(
      this.opts.db,
      task,
      { ...patch, phase: "done", completedAt: now, updatedAt: now, pollCount: task.pollCount + 1, nextRunAt: null, claimToken: null, claimedUntil: null },
      { now, token, firstAttemptDelayMs: this.opts.config.webhookRetryScheduleMs[0] },
    );
    if (!done) return;
    if (done.status === "succeeded" && done.submittedAt !== null) this.durations.record(done.type, done.model, now - done.submittedAt);
    this.opts.nudges.dispatcher();
    this.opts.nudges.submitter();
  }
}


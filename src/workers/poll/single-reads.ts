import { storedContext } from "../../telemetry/index.js";
import { nextReadAt, readFailed, type PollStrategy } from "../../core/poll-plan.js";
import type { TaskRow } from "../../store/rows.js";
import { UpstreamError } from "../../upstream/errors.js";
import type { PollerOptions } from "./ports.js";

/**
 * The poller's single reads: one task read under a token of the read budget, its answer recorded
 * by the lifecycle, a failure carried out as core/poll-plan.ts's readFailed plans it. Keeps, per
 * task, when its current run of JSON 404 task_not_found answers began (LOST_AFTER_MS).
 */
export class SingleReads {
  private readonly notFound = new Map<string, number>();

  constructor(
    private readonly deps: Pick<
      PollerOptions,
      "clock" | "budget" | "metrics" | "lifecycle" | "accounts" | "durations" | "logger"
    >,
    private readonly strategy: PollStrategy,
  ) {}

  /** Reads one claimed task; a task the budget has no token for goes back untouched. */
  async readOne(task: TaskRow): Promise<void> {
    const { clock, budget, metrics, lifecycle } = this.deps;
    const token = task.claimToken!;
    if (!(await budget.take(task.upstreamAccount))) {
      await lifecycle.release(task, token);
      return;
    }
    try {
      const remote = await (await this.deps.accounts.get(task.upstreamAccount)).getTask(
        task.upstreamTaskId!,
        storedContext(task),
      );
      metrics?.upstreamCalls.inc({ endpoint: "read", outcome: "ok" });
      this.notFound.delete(task.id);
      const now = clock.now();
      const expected =
        this.strategy === "round-robin" ? null : await this.deps.durations.expected(task.type, task.model);
      await lifecycle.recordObservation(task, token, remote, nextReadAt(task, now, this.strategy, expected));
    } catch (err) {
      await this.readFailed(task, token, err);
    }
  }

  /** Carries out what readFailed makes of a failed single read. */
  private async readFailed(task: TaskRow, token: string, err: unknown): Promise<void> {
    const { clock, budget, logger, metrics, lifecycle } = this.deps;
    const now = clock.now();
    const e = err instanceof UpstreamError ? err : null;
    metrics?.upstreamCalls.inc({ endpoint: "read", outcome: e?.code ?? "error" });
    const log = {
      task_id: task.id,
      upstream_task_id: task.upstreamTaskId,
      account: task.upstreamAccount,
      code: e?.code ?? String(err),
    };
    const plan = readFailed(task, e, now, this.notFound.get(task.id));
    switch (plan.kind) {
      case "too_large":
        await lifecycle.failUnusable(task, token, plan.error);
        logger.error(log, "upstream task answer larger than UPSTREAM_MAX_BODY_BYTES; ending the task failed");
        return;
      case "paused":
        await budget.pause(task.upstreamAccount, plan.until);
        await lifecycle.retryLater(task, token, plan.until);
        logger.warn({ ...log, retry_in_ms: plan.until - now }, "upstream read limited; pausing reads for this account");
        return;
      case "lost":
        this.notFound.delete(task.id);
        await lifecycle.fail(task, token, plan.error);
        logger.warn(log, "upstream no longer knows the task; ending it failed");
        return;
      case "retry":
        if (plan.notFoundSince !== undefined) this.notFound.set(task.id, plan.notFoundSince);
        await lifecycle.retryLater(task, token, plan.at, { pollCount: plan.pollCount });
        logger.warn({ ...log, retry_in_ms: plan.at - now }, "upstream read failed");
    }
  }
}

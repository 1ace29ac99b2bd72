import type { Clock } from "../clock.js";
import { ORPHAN_OUTPUT_AGE_MS } from "../core/stored-output.js";
import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";
import type { TickResult } from "./loop.js";

const DAY_MS = 24 * 60 * 60 * 1000;
const BATCH = 500;
const PERIOD_MS = 60 * 60 * 1000;

/** Removes finished tasks (and their events and attempts) and settled notices older than TASK_RETENTION_DAYS, in small batches. */
export class Pruner {
  constructor(
    private readonly opts: {
      store: Pick<Store, "tasks" | "notices" | "outputs">;
      clock: Clock;
      logger: Logger;
      retentionDays: number;
    },
  ) {}

  /** Prunes one batch of finished tasks and one of settled notices; returns how many rows were removed. */
  async runOnce(): Promise<number> {
    const before = this.opts.clock.now() - this.opts.retentionDays * DAY_MS;
    const tasks = await this.opts.store.tasks.pruneFinished(before, BATCH);
    const notices = await this.opts.store.notices.prune(before, BATCH);
    // Outputs in pieces whose task is gone, or whose transition never came (core/stored-output.ts).
    const outputs = await this.opts.store.outputs.sweep(this.opts.clock.now() - ORPHAN_OUTPUT_AGE_MS, BATCH);
    return Math.max(tasks, notices, outputs);
  }

  async tick(): Promise<TickResult> {
    const removed = await this.runOnce();
    if (removed > 0) this.opts.logger.info({ removed }, "pruned finished tasks and notices past retention");
    // A full batch means more may be waiting: go again soon, else look again in an hour.
    return { didWork: removed === BATCH, nextDueAt: this.opts.clock.now() + (removed === BATCH ? 1_000 : PERIOD_MS) };
  }
}

import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { isDatabaseUnavailable, type DatabaseHealth } from "../store/database-health.js";
import { cappedBackoff } from "../core/backoff.js";

export interface TickResult {
  /** Whether this tick claimed anything; an idle tick never loops again at once. */
  didWork: boolean;
  /** When the next row is due (clock ms), or null when nothing is scheduled. */
  nextDueAt: number | null;
}

export interface LoopOptions {
  name: string;
  clock: Clock;
  logger: Logger;
  tick: () => Promise<TickResult>;
  /** Longest sleep with nothing due; also the heartbeat period /readyz relies on. */
  idleMs?: number;
  /** Database failures (disk full, unreachable) are counted there and logged rate-limited, not once per tick. */
  database?: DatabaseHealth;
  /**
   * A nudge runs the next tick this long after the last one at the earliest, so a burst of nudges
   * (a creation each) makes one tick, not one per request. 0: at once.
   */
  coalesceMs?: number;
}

/**
 * Runs a worker's tick, then sleeps until its next due row or a nudge, whichever is first.
 * No fixed-interval polling: an idle loop wakes only when nudged or every idleMs as a safety net
 * (a row written by another process, e.g. the CLI). A thrown error never ends the loop; it backs off.
 */
export class WorkerLoop {
  private running = false;
  private wake: (() => void) | null = null;
  private nudged = false;
  private done: Promise<void> = Promise.resolve();
  private failures = 0;
  private lastTickAt = 0;
  /** Clock time of the last completed tick (successful or not), for stall detection. */
  lastBeatAt: number;

  constructor(private readonly opts: LoopOptions) {
    this.lastBeatAt = opts.clock.now();
  }

  get name(): string {
    return this.opts.name;
  }

  get isRunning(): boolean {
    return this.running;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.lastBeatAt = this.opts.clock.now();
    this.done = this.run();
  }

  /** Something new may be due now: run a tick soon instead of sleeping. */
  nudge(): void {
    if (this.nudged) return;
    this.nudged = true;
    const wake = this.wake;
    if (!wake) return;
    const wait = (this.opts.coalesceMs ?? 0) - (performance.now() - this.lastTickAt);
    if (wait > 0) setTimeout(wake, wait).unref();
    else wake();
  }

  /** Stops after the current tick; resolves when it has finished. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.done;
  }

  private async run(): Promise<void> {
    const idleMs = this.opts.idleMs ?? 30_000;
    while (this.running) {
      this.nudged = false;
      let delay: number;
      try {
        const result = await this.opts.tick();
        this.lastTickAt = performance.now();
        this.failures = 0;
        const untilDue = result.nextDueAt === null ? idleMs : result.nextDueAt - this.opts.clock.now();
        delay = Math.min(idleMs, Math.max(result.didWork ? 0 : 25, untilDue));
      } catch (err) {
        this.failures += 1;
        delay = cappedBackoff({ attempt: this.failures, baseMs: 500, maxMs: 30_000 });
        if (this.opts.database && isDatabaseUnavailable(err))
          this.opts.database.failed(err, `worker ${this.opts.name}`);
        else this.opts.logger.error({ err, worker: this.opts.name, retry_in_ms: delay }, "worker tick failed");
      }
      this.lastBeatAt = this.opts.clock.now();
      if (!this.running) break;
      // Nudged during the tick: run again, after the coalescing gap.
      if (this.nudged) delay = Math.min(delay, this.opts.coalesceMs ?? 0);
      if (delay <= 0) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = null;
    }
  }
}

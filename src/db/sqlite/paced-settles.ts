/**
 * Committed units' settles, paced (issue #38 item 7): a group commit's units settle only after their
 * COMMIT (and its sync), and each settle runs its caller's next step (an answer to write, a poll
 * result's next call). A batch of 256 settled in one turn was a stall of its own; so they settle in
 * commit order, one at a time, for a bounded time a turn, the rest in later turns with other I/O
 * served in between.
 */

/**
 * Committed units settled in one turn at most (their callers' continuations, an answer each, run in
 * its microtasks); the rest settle in the next turns, in order.
 */
export const SETTLES_PER_TURN = 32;

/**
 * How long one turn settles committed units: each unit's continuation runs before the next unit
 * settles, and once they have taken this long the rest wait for a later turn. 32 answers of a
 * creation, or 32 poll results each starting its next step, were 10-25 ms of one turn under load
 * (issue #38 item 7).
 */
export const SETTLE_BUDGET_MS = 4;

export class PacedSettles {
  private readonly queue: Array<() => void> = [];
  /** A turn is settling, or one is scheduled to: settles added meanwhile join its queue. */
  private running = false;

  constructor(
    private readonly perTurn = SETTLES_PER_TURN,
    private readonly budgetMs = SETTLE_BUDGET_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Queues `settles` after those already waiting. Each runs before the next, with its caller's
   * continuation in the microtasks after it, so the turn's clock counts that work too; a turn
   * settles for budgetMs (and at most perTurn settles), the rest in later turns, in order.
   */
  add(settles: Array<() => void>): void {
    for (const settle of settles) this.queue.push(settle);
    if (!this.running) this.settleSome();
  }

  /** Settles everything still queued, now (the store closes right after). */
  drain(): void {
    for (const settle of this.queue.splice(0)) settle();
  }

  private readonly settleSome = (): void => {
    this.running = true;
    const started = this.now();
    let settled = 0;
    const next = (): void => {
      if (this.queue.length === 0) {
        this.running = false;
        return;
      }
      if (settled >= this.perTurn || (settled > 0 && this.now() - started >= this.budgetMs)) {
        setImmediate(this.settleSome);
        return;
      }
      this.queue.shift()!();
      settled++;
      // Queued after the settled unit's own reaction: its caller's next step runs, and is timed, first.
      queueMicrotask(next);
    };
    next();
  };
}

import { performance } from "node:perf_hooks";
import { setImmediate as realImmediate } from "node:timers";

/**
 * A later turn of the event loop (after the I/O already waiting): for work over many bytes or rows
 * that must not hold one turn for long (issue #38 item 7: a 7 MB upstream answer read, copied or
 * stored in one go was 15-20 ms of a turn each).
 */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** How many bytes of large bodies the whole process reads or copies in one turn (TurnBytes). */
export const BYTES_PER_TURN = 1024 * 1024;

/** The slice a large body's reader or copier asks for at a time (TurnBytes.take). */
export const BYTES_PER_SLICE = 256 * 1024;

/**
 * One budget of bytes a turn shared by every large body in flight: eight 7 MB answers landing
 * together, each yielding after its own megabyte, still read or copied eight megabytes in one
 * check phase (issue #38 item 7). A slice of work waits for a turn with room for it; a turn grants
 * slices in the order they asked until BYTES_PER_TURN is taken (at least one slice a turn, however
 * large), the rest wait for the next turn.
 */
export class TurnBytes {
  private waiting: Array<{ bytes: number; go: () => void }> = [];
  private scheduled = false;

  constructor(private readonly perTurn = BYTES_PER_TURN) {}

  /** Resolves in a later turn that has room for `bytes`: the caller does that slice of work then. */
  take(bytes: number): Promise<void> {
    return new Promise((go) => {
      this.waiting.push({ bytes, go });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(this.grant);
      }
    });
  }

  private readonly grant = (): void => {
    let granted = 0;
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!;
      if (granted > 0 && granted + next.bytes > this.perTurn) break;
      this.waiting.shift();
      granted += next.bytes;
      next.go();
    }
    if (this.waiting.length > 0) setImmediate(this.grant);
    else this.scheduled = false;
  };
}

/** The process's one budget (TurnBytes): the upstream bodies' reads and the parse worker's copies share it. */
export const turnBytes = new TurnBytes();

/** How long one turn of the event loop runs gated background work before the rest waits (TurnTime). */
export const TURN_WORK_MS = 10;

/**
 * One clock a turn for the relay's background work (the workers' upstream calls: submissions,
 * reads, list reads), so any number of them cannot hold one turn of the event loop and keep
 * requests waiting (issue #38 item 7: a turn that started 30 submissions, handled a dozen reads'
 * answers and recorded them ran 40-57 ms of CPU; a group-commit flush ran 10 ms more on a budget of its
 * own). A piece of background work runs through run(), or cuts itself to what left() allows (a flush):
 * it runs at once while the turn has run for less than TURN_WORK_MS since its first gated piece,
 * else it waits for a later turn, first come first served. A turn's clock runs from its first gated
 * piece through the next check phase, which grants waiting pieces one at a time from what is left of
 * that clock (at least one a turn, so every piece runs) and then resets it: what is not granted waits,
 * with the requests that arrive meanwhile served first. So one pass of the loop, whichever of its
 * phases the pieces run in, runs at most TURN_WORK_MS of gated work plus one piece.
 */
export class TurnTime {
  private startedAt: number | null = null;
  private ending = false;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly budgetMs = TURN_WORK_MS,
    // The real loop's clock and check phase even where a test fakes the globals: a turn is the event
    // loop's, and a waiting piece must not hang on a fake clock nobody advances.
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Runs `work` now when the turn has time left, so its synchronous part is on the clock before the
   * next piece asks; else in a later turn that has. Its answer, or its error, either way.
   */
  run<T>(work: () => T | Promise<T>): Promise<T> {
    if (this.waiting.length === 0 && this.elapsed() < this.budgetMs) {
      try {
        return Promise.resolve(work());
      } catch (error) {
        return Promise.reject(error);
      }
    }
    this.elapsed();
    return new Promise<void>((go) => this.waiting.push(go)).then(work);
  }

  /**
   * What is left of this turn's budget (negative once spent), starting its clock if none runs yet:
   * for work that cuts itself to fit rather than waiting whole for a later turn (the SQLite group
   * commit's flush). Its time counts as it runs: the clock is the wall clock since the turn's first
   * gated piece.
   */
  left(): number {
    return this.budgetMs - this.elapsed();
  }

  /** How long this turn has run since its first gated piece (starting its clock if none has yet). */
  private elapsed(): number {
    const now = this.now();
    if (this.startedAt === null) {
      this.startedAt = now;
      this.endLater();
    }
    return now - this.startedAt;
  }

  private endLater(): void {
    if (this.ending) return;
    this.ending = true;
    realImmediate(this.endTurn);
  }

  /** In the check phase: at least one waiting piece, whatever the clock says, then grant() goes on. */
  private readonly endTurn = (): void => {
    this.ending = false;
    if (this.waiting.length === 0) {
      this.startedAt = null;
      return;
    }
    this.elapsed();
    this.waiting.shift()!();
    queueMicrotask(this.grant);
  };

  /**
   * Waiting pieces in order, each run (as a microtask) before the clock is read again, while the
   * turn's clock has time; then the clock resets, and a later check phase grants what still waits.
   */
  private readonly grant = (): void => {
    if (this.waiting.length > 0 && this.elapsed() < this.budgetMs) {
      this.waiting.shift()!();
      queueMicrotask(this.grant);
      return;
    }
    this.startedAt = null;
    if (this.waiting.length > 0) this.endLater();
  };
}

/** The process's one clock for gated background work (TurnTime). */
export const turnTime = new TurnTime();

import { FairPool, type FairPoolOptions } from "../core/fair-pool.js";
import type { TickResult } from "./loop.js";

/**
 * What a pooled worker tells its loop (the dispatcher, the notifier, the mirror): how to claim, how
 * to run one claimed item, when to look again. The loop owns the rest: the pool, the work in
 * flight, one claim at a time, draining and closing (River's one service skeleton, `startstop`).
 */
export interface PooledPort<T> {
  /**
   * Claims what is due within the pool's room and hands each item to `start` as it is claimed, so
   * a later step of the same claim is sized by a pool that counts it. `full`: the claim took all
   * it had room for (more may be due at once).
   */
  claim(start: (item: T) => void): Promise<{ full: boolean }>;
  /** Runs one claimed item; it takes and releases its own slot. Null when it did not start (handed back). */
  run(item: T): Promise<void> | null;
  /** After a tick's claim: when the loop should look again (null: only a nudge or a settle wakes it). */
  nextDueAt(full: boolean): Promise<number | null>;
  /** A run rejected: the port's bookkeeping failed (logged there; the loop goes on). */
  failed(item: T, err: unknown): void;
  /**
   * After an item settled, while the loop accepts work: claims again for the slot it freed (the
   * dispatcher's refill, inside `exclusive`). True when the loop need not be woken at once for it.
   */
  refill?(item: T): Promise<boolean>;
  /** Whether the item's refill was already asked before it settled (then it is awaited even while draining). */
  refillAsked?(item: T): boolean;
}

/** What one claim started. */
export interface Claimed {
  started: Promise<void>[];
  full: boolean;
}

/**
 * One pooled claim loop: a FairPool of slots, the set of work in flight, and claims that never
 * overlap (a claim is sized by the pool's room, and no other claim may spend that room across its
 * await). `tick` is the production loop's step (it does not wait for the work it starts), `runOnce`
 * the tests' (it does); `drain` waits for the work in flight, `close` stops claiming for good.
 */
export class PooledLoop<T> {
  readonly pool: FairPool;
  /** Told when an item settles (a slot is free), so the worker loop claims again (set by the relay). */
  onSettled: () => void = () => {};
  private readonly inFlight = new Set<Promise<void>>();
  /**
   * Settled items whose refill has not answered yet: a refill asked as a record was queued claims
   * in a later turn (workers/delivery/refills.ts), and may start work, so drain waits for it too.
   */
  private readonly settling = new Set<Promise<void>>();
  private claiming: Promise<unknown> | null = null;
  /** Whether a settled item may claim again for its slot (the production loop; off while draining). */
  private refilling = false;
  private closed = false;

  constructor(
    private readonly port: PooledPort<T>,
    pool: FairPoolOptions,
  ) {
    this.pool = new FairPool(pool);
  }

  /** Work started and not yet settled. */
  get activeCount(): number {
    return this.inFlight.size;
  }

  /** Whether a settled item refills its slot now (the production loop, not draining). */
  get accepting(): boolean {
    return this.refilling && !this.closed;
  }

  /** Claims what is due and starts it; does not wait for it (the production loop). */
  async tick(): Promise<TickResult> {
    if (this.closed) return { didWork: false, nextDueAt: null };
    this.refilling = true;
    const { started, full } = await this.claimAndStart();
    return { didWork: started.length > 0, nextDueAt: await this.port.nextDueAt(full) };
  }

  /** Claims what is due, runs it and waits for every item it started (tests). */
  async runOnce(): Promise<number> {
    const { started } = await this.claimAndStart();
    await Promise.all(started);
    return started.length;
  }

  /** Waits for a running claim and the work in flight (graceful shutdown); a settling item no longer refills. */
  async drain(): Promise<void> {
    this.refilling = false;
    while (this.claiming || this.inFlight.size > 0 || this.settling.size > 0) {
      await this.claiming?.catch(() => null);
      await Promise.all([...this.inFlight, ...this.settling]);
    }
  }

  /** Stops claiming for good and waits for the work in flight. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.drain();
  }

  /** Runs `claim` when no other claim runs (a second caller waits for the first, then claims). */
  async exclusive<R>(claim: () => Promise<R>): Promise<R> {
    while (this.claiming) await this.claiming.catch(() => null);
    const running = claim();
    this.claiming = running;
    try {
      return await running;
    } finally {
      this.claiming = null;
    }
  }

  /** Starts one item and tracks it; null when the port handed it back. */
  start(item: T): Promise<void> | null {
    const work = this.port.run(item);
    return work ? this.track(item, work) : null;
  }

  /** One claim (the port's, or `claim`), under `exclusive`, collecting what it started. */
  async claimAndStart(
    claim: (start: (item: T) => boolean) => Promise<{ full: boolean }> = (start) => this.port.claim(start),
  ): Promise<Claimed> {
    if (this.closed) return { started: [], full: false };
    return this.exclusive(async () => {
      const started: Promise<void>[] = [];
      // `start` answers whether the item started (false: the port handed it back).
      const { full } = await claim((item) => {
        const work = this.start(item);
        if (work) started.push(work);
        return work !== null;
      });
      return { started, full };
    });
  }

  private track(item: T, work: Promise<void>): Promise<void> {
    const promise = work.catch((err: unknown) => this.port.failed(item, err));
    this.inFlight.add(promise);
    const settled = promise.then(async () => {
      this.inFlight.delete(promise);
      // A refill asked early (as the record was queued) answers here even if the loop stopped accepting since.
      const refill =
        this.port.refill && (this.accepting || this.port.refillAsked?.(item)) ? this.port.refill(item) : null;
      // A refill that throws has logged it (the port's own): the loop claims for the slot instead.
      const quiet = refill ? await refill.catch(() => false) : false;
      this.settling.delete(settled);
      if (!quiet) this.onSettled();
    });
    this.settling.add(settled);
    return promise;
  }
}

/**
 * A worker that is its own loop's port: the dispatcher, the notifier and the mirror extend it, so
 * each shows one face (`tick`, `runOnce`, `drain`, `slots`, `onSettled`) and implements only the port.
 */
export abstract class PooledWorker<T> implements PooledPort<T> {
  protected readonly loop: PooledLoop<T>;
  /** The worker's slots: each client's share, the reserve, the per-key cap (core/fair-pool.ts). */
  readonly slots: FairPool;

  constructor(pool: FairPoolOptions) {
    this.loop = new PooledLoop(this, pool);
    this.slots = this.loop.pool;
  }

  abstract claim(start: (item: T) => void): Promise<{ full: boolean }>;
  abstract run(item: T): Promise<void> | null;
  abstract nextDueAt(full: boolean): Promise<number | null>;
  abstract failed(item: T, err: unknown): void;

  /** Work started and not yet settled. */
  get activeCount(): number {
    return this.loop.activeCount;
  }

  /** Called when an item settles, so the worker loop claims more (set by the relay). */
  get onSettled(): () => void {
    return this.loop.onSettled;
  }
  set onSettled(fn: () => void) {
    this.loop.onSettled = fn;
  }

  /** Claims what is due and starts it; does not wait for it (the production loop). */
  tick(): Promise<TickResult> {
    return this.loop.tick();
  }

  /** Claims what is due, runs it and waits for every item it started (tests). */
  runOnce(): Promise<number> {
    return this.loop.runOnce();
  }

  /** Waits for the work in flight (graceful shutdown). */
  drain(): Promise<void> {
    return this.loop.drain();
  }
}

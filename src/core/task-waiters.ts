/**
 * Requests held by `Prefer: wait=N` (docs/contract.md, "Waiting for the result"), keyed by task id
 * and woken by the task's own transitions (Lifecycle in this process, a PostgreSQL notification from
 * another), never by reading the database on a timer. A held request is a pending promise and a
 * timer: it takes no worker slot and no connection while it waits.
 */

import { TaskWatchers, type WakeReason, type Watcher } from "./task-watchers.js";

/** The timer a hold ends with; injectable so tests and benchmarks can drive it. */
export interface WaitTimers {
  set(fire: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export const realTimers: WaitTimers = {
  set: (fire, ms) => setTimeout(fire, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** One held request: it watches one task and is woken by its transitions until its time is up. */
export class Hold implements Watcher {
  readonly kind = "hold" as const;
  private resume: (() => void) | undefined;
  private signalled = false;
  /** Its time is up (or the relay is stopping): answer with the task's current state. */
  expired = false;
  taskId: string | null = null;

  constructor(
    private readonly owner: TaskWaiters,
    readonly clientId: string,
  ) {}

  /** Watches a task's transitions (a creation knows its task only once it is stored). */
  watch(taskId: string): void {
    this.taskId = taskId;
    this.owner.watch(this, taskId);
  }

  /**
   * Resolves at the next wake-up or when the time is up. A wake-up between two calls is kept, so
   * one that lands while the caller reads the task is never lost.
   */
  next(): Promise<void> {
    if (this.signalled || this.expired) {
      this.signalled = false;
      return Promise.resolve();
    }
    this.owner.parked++;
    return new Promise((resolve) => {
      this.resume = resolve;
    });
  }

  /** @internal woken by the registry (its task changed, or a resync). */
  signal(_reason?: WakeReason): void {
    const resume = this.resume;
    this.resume = undefined;
    if (resume) {
      this.owner.parked--;
      resume();
    } else this.signalled = true;
  }

  /** Its time is up, or the relay is stopping: the next read answers. */
  end(): void {
    this.expired = true;
    this.signal();
  }

  /** Ends the wait now (the caller went away): the slot is given back as soon as the request settles. */
  expire(): void {
    this.end();
  }

  /**
   * What else a release gives back (the place counted in the store across instances,
   * services/task-wait.ts); set by whoever took it, called once.
   */
  onRelease: (() => Promise<void>) | undefined;

  /** Gives the client's slot back, and its place across instances; call once the answer is decided. */
  release(): Promise<void> {
    this.owner.release(this);
    const also = this.onRelease;
    this.onRelease = undefined;
    return also ? also() : Promise.resolve();
  }
}

/**
 * The held requests' view of the registry (core/task-watchers.ts), which they share with event
 * streams: their own bound per client and their timers.
 */
export class TaskWaiters {
  private readonly timers = new Map<Hold, unknown>();
  private readonly registry: TaskWatchers;
  /** Holds waiting for a wake-up right now (their task read, nothing in flight): a gauge. */
  parked = 0;

  constructor(
    private readonly opts: {
      /** How many requests one client may hold at once; one more is refused (429 rate_limit). */
      perClient: number;
      timers?: WaitTimers;
      /** The registry shared with event streams (a registry of its own when alone). */
      registry?: TaskWatchers;
    },
  ) {
    this.registry = opts.registry ?? new TaskWatchers();
  }

  get perClient(): number {
    return this.opts.perClient;
  }

  /** Requests held right now. */
  get size(): number {
    return this.registry.size("hold");
  }

  /** Requests held on this task right now. */
  watchers(taskId: string): number {
    return this.registry.watchers("hold", { task: taskId });
  }

  /**
   * A hold of `ms` for the client, or null when it already holds `perClient`. While the relay is
   * stopping a hold is expired at once: the request answers with the task's state as it is.
   */
  hold(clientId: string, ms: number): Hold | null {
    const hold = new Hold(this, clientId);
    if (!this.registry.admit(hold, this.opts.perClient)) return null;
    const timers = this.opts.timers ?? realTimers;
    this.timers.set(
      hold,
      timers.set(() => hold.end(), ms),
    );
    if (this.registry.isStopping) hold.end();
    return hold;
  }

  /** A transition of the task was recorded (here or, on PostgreSQL, by another instance). */
  wake(taskId: string): void {
    this.registry.wake({ taskId });
  }

  /**
   * Wake-ups may have been missed (on PostgreSQL, the LISTEN session was lost and is open again):
   * every held request reads its task once more, so a transition made during the gap is seen, and
   * so does every stream sharing the registry. Each subscriber of onResync is told too.
   */
  resync(): void {
    this.registry.resync();
  }

  /** Called on every resync (see resync); returns the function that stops the calls. */
  onResync(listener: () => void): () => void {
    return this.registry.onResync(listener);
  }

  /** Shutdown: every held request answers now, and new ones do not wait, so the HTTP drain is quick. */
  releaseAll(): void {
    this.registry.endAll();
  }

  /** @internal see Hold.watch. */
  watch(hold: Hold, taskId: string): void {
    this.registry.attach(hold, { task: taskId });
  }

  /** @internal see Hold.release. */
  release(hold: Hold): void {
    if (!this.registry.remove(hold)) return;
    (this.opts.timers ?? realTimers).clear(this.timers.get(hold));
    this.timers.delete(hold);
  }
}

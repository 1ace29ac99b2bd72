/**
 * Requests held by `Prefer: wait=N` (docs/contract.md, "Waiting for the result"), keyed by task id
 * and woken by the task's own transitions (Lifecycle in this process, a PostgreSQL notification from
 * another), never by reading the database on a timer. A held request is a pending promise and a
 * timer: it takes no worker slot and no connection while it waits.
 */

/** The timer a hold ends with; injectable so tests and benchmarks can drive it. */
export interface WaitTimers {
  set(fire: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const realTimers: WaitTimers = {
  set: (fire, ms) => setTimeout(fire, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** One held request: it watches one task and is woken by its transitions until its time is up. */
export class Hold {
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

  /** @internal woken by TaskWaiters. */
  signal(expire = false): void {
    if (expire) this.expired = true;
    const resume = this.resume;
    this.resume = undefined;
    if (resume) {
      this.owner.parked--;
      resume();
    } else this.signalled = true;
  }

  /** Ends the wait now (the caller went away): the slot is given back as soon as the request settles. */
  expire(): void {
    this.signal(true);
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

export class TaskWaiters {
  private readonly byTask = new Map<string, Set<Hold>>();
  private readonly byClient = new Map<string, number>();
  private readonly timers = new Map<Hold, unknown>();
  private stopping = false;
  /** Holds waiting for a wake-up right now (their task read, nothing in flight): a gauge. */
  parked = 0;

  constructor(
    private readonly opts: {
      /** How many requests one client may hold at once; one more is refused (429 rate_limit). */
      perClient: number;
      timers?: WaitTimers;
    },
  ) {}

  get perClient(): number {
    return this.opts.perClient;
  }

  /** Requests held right now. */
  get size(): number {
    return this.timers.size;
  }

  /** Requests held on this task right now. */
  watchers(taskId: string): number {
    return this.byTask.get(taskId)?.size ?? 0;
  }

  /**
   * A hold of `ms` for the client, or null when it already holds `perClient`. While the relay is
   * stopping a hold is expired at once: the request answers with the task's state as it is.
   */
  hold(clientId: string, ms: number): Hold | null {
    const held = this.byClient.get(clientId) ?? 0;
    if (held >= this.opts.perClient) return null;
    this.byClient.set(clientId, held + 1);
    const hold = new Hold(this, clientId);
    const timers = this.opts.timers ?? realTimers;
    this.timers.set(
      hold,
      timers.set(() => hold.signal(true), ms),
    );
    if (this.stopping) hold.signal(true);
    return hold;
  }

  /** A transition of the task was recorded (here or, on PostgreSQL, by another instance). */
  wake(taskId: string): void {
    const holds = this.byTask.get(taskId);
    if (holds) for (const hold of holds) hold.signal();
  }

  /**
   * Wake-ups may have been missed (on PostgreSQL, the LISTEN session was lost and is open again):
   * every held request reads its task once more, so a transition made during the gap is seen.
   * Each subscriber of onResync (event streams) is told too.
   */
  resync(): void {
    for (const holds of this.byTask.values()) for (const hold of holds) hold.signal();
    for (const listener of this.resyncListeners) listener();
  }

  /** Called on every resync (see resync); returns the function that stops the calls. */
  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener);
    return () => this.resyncListeners.delete(listener);
  }

  private readonly resyncListeners = new Set<() => void>();

  /** Shutdown: every held request answers now, and new ones do not wait, so the HTTP drain is quick. */
  releaseAll(): void {
    this.stopping = true;
    for (const hold of this.timers.keys()) hold.signal(true);
  }

  /** @internal see Hold.watch. */
  watch(hold: Hold, taskId: string): void {
    let holds = this.byTask.get(taskId);
    if (!holds) this.byTask.set(taskId, (holds = new Set()));
    holds.add(hold);
  }

  /** @internal see Hold.release. */
  release(hold: Hold): void {
    if (!this.timers.has(hold)) return;
    (this.opts.timers ?? realTimers).clear(this.timers.get(hold));
    this.timers.delete(hold);
    const held = (this.byClient.get(hold.clientId) ?? 1) - 1;
    if (held > 0) this.byClient.set(hold.clientId, held);
    else this.byClient.delete(hold.clientId);
    if (hold.taskId === null) return;
    const holds = this.byTask.get(hold.taskId);
    holds?.delete(hold);
    if (holds?.size === 0) this.byTask.delete(hold.taskId);
  }
}

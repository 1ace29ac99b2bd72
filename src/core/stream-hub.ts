/**
 * Open event streams (docs/contract.md, "Live progress"), woken by task transitions exactly as
 * requests held by Prefer: wait are (Lifecycle in this process, a PostgreSQL notification from
 * another), never by reading the database on a timer. An open stream is a pending promise: it
 * holds no worker slot and no database connection while it waits. The hub's only timer writes
 * keep-alive comments, which read nothing.
 */
import { realTimers, type WaitTimers } from "./task-waiters.js";
import {
  type StreamTopic,
  type TaskChange,
  TaskWatchers,
  topicKey,
  type WakeReason,
  type Watcher,
} from "./task-watchers.js";

/** What next() resolves with: the stream ended, or the reasons gathered since the last call. */
export type StreamWake = { closed: true } | { closed: false; reasons: ReadonlySet<WakeReason> };

/** A keep-alive comment this often: proxies close connections quiet for longer (often 30 to 60 s). */
export const KEEP_ALIVE_MS = 15_000;

/** One open stream: woken by its topics' changes until the caller leaves or the relay stops. */
export class Subscription implements Watcher {
  readonly kind = "stream" as const;
  private resume: ((wake: StreamWake) => void) | undefined;
  private pending = new Set<WakeReason>();
  closed = false;
  /** Written on each keep-alive tick; set by the stream's writer. */
  onKeepAlive: (() => void) | undefined;
  readonly topics: string[] = [];

  constructor(
    private readonly hub: StreamHub,
    readonly clientId: string,
  ) {}

  /** Also wakes on this topic's changes (an account's, once the task's account is known). */
  watch(topic: StreamTopic): void {
    const key = topicKey(topic);
    if (this.topics.includes(key)) return;
    this.topics.push(key);
    this.hub.attach(this, topic);
  }

  /** Resolves at the next change or close; changes between two calls are kept, so none is lost. */
  next(): Promise<StreamWake> {
    if (this.closed) return Promise.resolve({ closed: true });
    if (this.pending.size > 0) return Promise.resolve(this.take());
    this.hub.parked++;
    return new Promise((resolve) => {
      this.resume = (wake) => {
        this.hub.parked--;
        resolve(wake);
      };
    });
  }

  /** Wakes the stream for a reason (the hub's changes; the stream's own progress timer). */
  signal(reason: WakeReason): void {
    if (this.closed) return;
    this.pending.add(reason);
    const resume = this.resume;
    this.resume = undefined;
    resume?.(this.take());
  }

  /** The relay is stopping: the stream ends. */
  end(): void {
    this.close();
  }

  /** Ends the stream (the caller went away, or the relay stops); its slot is given back on release(). */
  close(): void {
    this.closed = true;
    const resume = this.resume;
    this.resume = undefined;
    resume?.({ closed: true });
  }

  /**
   * What else a release gives back (the place counted in the store across instances,
   * services/streams.ts); set by whoever took it, called once.
   */
  onRelease: (() => Promise<void>) | undefined;

  /** Gives the client's slot back, and its place across instances; call once the stream has ended. */
  release(): Promise<void> {
    this.hub.release(this);
    const also = this.onRelease;
    this.onRelease = undefined;
    return also ? also() : Promise.resolve();
  }

  private take(): StreamWake {
    const reasons = this.pending;
    this.pending = new Set();
    return { closed: false, reasons };
  }
}

/**
 * The event streams' view of the registry (core/task-watchers.ts), which they share with held
 * requests: their own bound per client, and the keep-alive timer.
 */
export class StreamHub {
  private readonly registry: TaskWatchers;
  private keepAlive: unknown;
  /** Streams waiting for a change right now (everything read, nothing in flight): a gauge. */
  parked = 0;

  constructor(
    private readonly opts: {
      /** How many streams one client may hold open at once; one more is refused (429 rate_limit). */
      perClient: number;
      timers?: WaitTimers;
      keepAliveMs?: number;
      /** The registry shared with held requests (a registry of its own when alone). */
      registry?: TaskWatchers;
    },
  ) {
    this.registry = opts.registry ?? new TaskWatchers();
  }

  get perClient(): number {
    return this.opts.perClient;
  }

  /** Streams open right now. */
  get size(): number {
    return this.registry.size("stream");
  }

  /** Streams open on this topic right now. */
  watchers(topic: StreamTopic): number {
    return this.registry.watchers("stream", topic);
  }

  /** Streams the client holds open right now. */
  ofClient(clientId: string): number {
    return this.registry.ofClient("stream", clientId);
  }

  /** A stream for the client, or null when it already holds `perClient` or the relay is stopping. */
  subscribe(clientId: string): Subscription | null {
    if (this.registry.isStopping) return null;
    const sub = new Subscription(this, clientId);
    if (!this.registry.admit(sub, this.opts.perClient)) return null;
    if (this.size === 1) this.armKeepAlive();
    return sub;
  }

  get isStopping(): boolean {
    return this.registry.isStopping;
  }

  /** A task changed (here or, on PostgreSQL, on another instance): its streams, its client's and its account's wake. */
  wake(change: TaskChange): void {
    this.registry.wake(change);
  }

  /** Every watcher re-reads: changes may have gone unheard (a lost LISTEN session was opened again). */
  wakeAll(): void {
    this.registry.wakeAll();
  }

  /** Shutdown: every stream ends now and no new one opens, so the HTTP drain is quick. */
  closeAll(): void {
    this.registry.endAll();
  }

  /** @internal see Subscription.watch. */
  attach(sub: Subscription, topic: StreamTopic): void {
    this.registry.attach(sub, topic);
  }

  /** @internal see Subscription.release. */
  release(sub: Subscription): void {
    if (!this.registry.remove(sub)) return;
    if (this.size === 0 && this.keepAlive !== undefined) {
      (this.opts.timers ?? realTimers).clear(this.keepAlive);
      this.keepAlive = undefined;
    }
  }

  /** One timer for every open stream: each writes a comment, nothing is read. */
  private armKeepAlive(): void {
    const timers = this.opts.timers ?? realTimers;
    this.keepAlive = timers.set(() => {
      this.keepAlive = undefined;
      for (const sub of this.registry.all("stream")) (sub as Subscription).onKeepAlive?.();
      if (this.size > 0) this.armKeepAlive();
    }, this.opts.keepAliveMs ?? KEEP_ALIVE_MS);
  }
}

/**
 * Open event streams (docs/contract.md, "Live progress"), woken by task transitions exactly as
 * requests held by Prefer: wait are (Lifecycle in this process, a PostgreSQL notification from
 * another), never by reading the database on a timer. An open stream is a pending promise: it
 * holds no worker slot and no database connection while it waits. The hub's only timer writes
 * keep-alive comments, which read nothing.
 */
import type { WaitTimers } from "./task-waiters.js";

/** A recorded change of a task: its id, and, when the teller knows them, its client and upstream account. */
export interface TaskChange {
  taskId: string;
  clientId?: string | undefined;
  account?: string | undefined;
}

/** What one stream is woken by: its task's changes, every change of its client's tasks, or of an account's. */
export type StreamTopic = { task: string } | { client: string } | { account: string };

/** Why a stream woke: its own task changed, a task of its client, of its account, or anything (a resync). */
export type WakeReason = "task" | "client" | "account" | "all";

/** What next() resolves with: the stream ended, or the reasons gathered since the last call. */
export type StreamWake = { closed: true } | { closed: false; reasons: ReadonlySet<WakeReason> };

const realTimers: WaitTimers = {
  set: (fire, ms) => setTimeout(fire, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** A keep-alive comment this often: proxies close connections quiet for longer (often 30 to 60 s). */
export const KEEP_ALIVE_MS = 15_000;

/** One open stream: woken by its topics' changes until the caller leaves or the relay stops. */
export class Subscription {
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
    this.hub.attach(this, key);
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

  /** Ends the stream (the caller went away, or the relay stops); its slot is given back on release(). */
  close(): void {
    this.closed = true;
    const resume = this.resume;
    this.resume = undefined;
    resume?.({ closed: true });
  }

  /** Gives the client's slot back; call once the stream has ended. */
  release(): void {
    this.hub.release(this);
  }

  private take(): StreamWake {
    const reasons = this.pending;
    this.pending = new Set();
    return { closed: false, reasons };
  }
}

const topicKey = (topic: StreamTopic): string =>
  "task" in topic ? `t:${topic.task}` : "client" in topic ? `c:${topic.client}` : `a:${topic.account}`;

export class StreamHub {
  private readonly byTopic = new Map<string, Set<Subscription>>();
  private readonly byClient = new Map<string, number>();
  private readonly open = new Set<Subscription>();
  private keepAlive: unknown;
  private stopping = false;
  /** Streams waiting for a change right now (everything read, nothing in flight): a gauge. */
  parked = 0;

  constructor(
    private readonly opts: {
      /** How many streams one client may hold open at once; one more is refused (429 rate_limit). */
      perClient: number;
      timers?: WaitTimers;
      keepAliveMs?: number;
    },
  ) {}

  get perClient(): number {
    return this.opts.perClient;
  }

  /** Streams open right now. */
  get size(): number {
    return this.open.size;
  }

  /** Streams open on this topic right now. */
  watchers(topic: StreamTopic): number {
    return this.byTopic.get(topicKey(topic))?.size ?? 0;
  }

  /** Streams the client holds open right now. */
  ofClient(clientId: string): number {
    return this.byClient.get(clientId) ?? 0;
  }

  /** A stream for the client, or null when it already holds `perClient` or the relay is stopping. */
  subscribe(clientId: string): Subscription | null {
    const held = this.byClient.get(clientId) ?? 0;
    if (held >= this.opts.perClient || this.stopping) return null;
    this.byClient.set(clientId, held + 1);
    const sub = new Subscription(this, clientId);
    this.open.add(sub);
    if (this.open.size === 1) this.armKeepAlive();
    return sub;
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  /** A task changed (here or, on PostgreSQL, on another instance): its streams, its client's and its account's wake. */
  wake(change: TaskChange): void {
    this.signal(`t:${change.taskId}`, "task");
    if (change.clientId) this.signal(`c:${change.clientId}`, "client");
    if (change.account) this.signal(`a:${change.account}`, "account");
  }

  /** Every stream re-reads: changes may have gone unheard (a lost LISTEN session was opened again). */
  wakeAll(): void {
    for (const sub of this.open) sub.signal("all");
  }

  /** Shutdown: every stream ends now and no new one opens, so the HTTP drain is quick. */
  closeAll(): void {
    this.stopping = true;
    for (const sub of this.open) sub.close();
  }

  /** @internal see Subscription.watch. */
  attach(sub: Subscription, key: string): void {
    let subs = this.byTopic.get(key);
    if (!subs) this.byTopic.set(key, (subs = new Set()));
    subs.add(sub);
  }

  /** @internal see Subscription.release. */
  release(sub: Subscription): void {
    if (!this.open.delete(sub)) return;
    const held = (this.byClient.get(sub.clientId) ?? 1) - 1;
    if (held > 0) this.byClient.set(sub.clientId, held);
    else this.byClient.delete(sub.clientId);
    for (const key of sub.topics) {
      const subs = this.byTopic.get(key);
      subs?.delete(sub);
      if (subs?.size === 0) this.byTopic.delete(key);
    }
    if (this.open.size === 0 && this.keepAlive !== undefined) {
      (this.opts.timers ?? realTimers).clear(this.keepAlive);
      this.keepAlive = undefined;
    }
  }

  private signal(key: string, reason: WakeReason): void {
    const subs = this.byTopic.get(key);
    if (subs) for (const sub of subs) sub.signal(reason);
  }

  /** One timer for every open stream: each writes a comment, nothing is read. */
  private armKeepAlive(): void {
    const timers = this.opts.timers ?? realTimers;
    this.keepAlive = timers.set(() => {
      this.keepAlive = undefined;
      for (const sub of this.open) sub.onKeepAlive?.();
      if (this.open.size > 0) this.armKeepAlive();
    }, this.opts.keepAliveMs ?? KEEP_ALIVE_MS);
  }
}

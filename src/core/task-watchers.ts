/**
 * The one registry of everything that waits on task transitions (issue #38): requests held by
 * `Prefer: wait` (task-waiters.ts) and open event streams (stream-hub.ts) are both watchers of
 * topics (a task, a client's tasks, an account's), woken by the same wake (Lifecycle in this
 * process, a PostgreSQL notification from another), the same resync after a lost LISTEN session,
 * and ended together at shutdown. Each kind keeps its own bound per client, counted here.
 */

/** A recorded change of a task: its id, and, when the teller knows them, its client and upstream account. */
export interface TaskChange {
  taskId: string;
  clientId?: string | undefined;
  account?: string | undefined;
}

/** What one watcher is woken by: its task's changes, every change of its client's tasks, or of an account's. */
export type StreamTopic = { task: string } | { client: string } | { account: string };

/** Why a watcher woke: its own task changed, a task of its client, of its account, or anything (a resync). */
export type WakeReason = "task" | "client" | "account" | "all";

export const topicKey = (topic: StreamTopic): string =>
  "task" in topic ? `t:${topic.task}` : "client" in topic ? `c:${topic.client}` : `a:${topic.account}`;

/** The kinds of watcher, each with its own bound per client. */
export type WatcherKind = "hold" | "stream";

/** One watcher: woken with a reason, ended at shutdown. */
export interface Watcher {
  readonly kind: WatcherKind;
  readonly clientId: string;
  signal(reason: WakeReason): void;
  /** The relay is stopping: answer now (a hold) or close (a stream). */
  end(): void;
}

export class TaskWatchers {
  private readonly byTopic = new Map<string, Set<Watcher>>();
  private readonly topicsOf = new Map<Watcher, string[]>();
  private readonly members: Record<WatcherKind, Set<Watcher>> = { hold: new Set(), stream: new Set() };
  private readonly perClient: Record<WatcherKind, Map<string, number>> = { hold: new Map(), stream: new Map() };
  private readonly resyncListeners = new Set<() => void>();
  private stopping = false;

  get isStopping(): boolean {
    return this.stopping;
  }

  /** Watchers of the kind registered right now. */
  size(kind: WatcherKind): number {
    return this.members[kind].size;
  }

  /** Watchers of the kind the client holds right now. */
  ofClient(kind: WatcherKind, clientId: string): number {
    return this.perClient[kind].get(clientId) ?? 0;
  }

  /** Watchers of the kind on this topic right now. */
  watchers(kind: WatcherKind, topic: StreamTopic): number {
    let n = 0;
    for (const w of this.byTopic.get(topicKey(topic)) ?? []) if (w.kind === kind) n++;
    return n;
  }

  /** Every watcher of the kind, for what each kind does to all of its own (keep-alives). */
  all(kind: WatcherKind): Iterable<Watcher> {
    return this.members[kind];
  }

  /** Registers the watcher if its client holds fewer than `cap` of its kind; false otherwise. */
  admit(watcher: Watcher, cap: number): boolean {
    const counts = this.perClient[watcher.kind];
    const held = counts.get(watcher.clientId) ?? 0;
    if (held >= cap) return false;
    counts.set(watcher.clientId, held + 1);
    this.members[watcher.kind].add(watcher);
    return true;
  }

  /** Also wakes the watcher on this topic's changes. */
  attach(watcher: Watcher, topic: StreamTopic): void {
    const key = topicKey(topic);
    const topics = this.topicsOf.get(watcher) ?? [];
    if (topics.includes(key)) return;
    topics.push(key);
    this.topicsOf.set(watcher, topics);
    let set = this.byTopic.get(key);
    if (!set) this.byTopic.set(key, (set = new Set()));
    set.add(watcher);
  }

  /** Unregisters the watcher and gives its client's place back; false when it was not registered. */
  remove(watcher: Watcher): boolean {
    if (!this.members[watcher.kind].delete(watcher)) return false;
    const counts = this.perClient[watcher.kind];
    const held = (counts.get(watcher.clientId) ?? 1) - 1;
    if (held > 0) counts.set(watcher.clientId, held);
    else counts.delete(watcher.clientId);
    for (const key of this.topicsOf.get(watcher) ?? []) {
      const set = this.byTopic.get(key);
      set?.delete(watcher);
      if (set?.size === 0) this.byTopic.delete(key);
    }
    this.topicsOf.delete(watcher);
    return true;
  }

  /** A task changed (here or, on PostgreSQL, on another instance): its watchers, its client's and its account's wake. */
  wake(change: TaskChange): void {
    this.signal(`t:${change.taskId}`, "task");
    if (change.clientId) this.signal(`c:${change.clientId}`, "client");
    if (change.account) this.signal(`a:${change.account}`, "account");
  }

  /**
   * Wake-ups may have been missed (on PostgreSQL, the LISTEN session was lost and is open again):
   * every watcher, held request and stream alike, reads its state once more; listeners are told.
   */
  resync(): void {
    this.wakeAll();
    for (const listener of this.resyncListeners) listener();
  }

  /** Every watcher reads its state once more (a resync's wake, without telling its listeners). */
  wakeAll(): void {
    for (const kind of ["hold", "stream"] as const) for (const w of [...this.members[kind]]) w.signal("all");
  }

  /** Called on every resync; returns the function that stops the calls. */
  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener);
    return () => this.resyncListeners.delete(listener);
  }

  /** Shutdown: every watcher ends now, and the kinds refuse or end new ones, so the HTTP drain is quick. */
  endAll(): void {
    this.stopping = true;
    for (const kind of ["hold", "stream"] as const) for (const w of [...this.members[kind]]) w.end();
  }

  private signal(key: string, reason: WakeReason): void {
    const set = this.byTopic.get(key);
    if (set) for (const w of [...set]) w.signal(reason);
  }
}

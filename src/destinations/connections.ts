import { raceSignal, startDeadline, systemTimers, type Timers } from "../net/deadline.js";

/**
 * Broker connections per client and broker (docs/destinations.md, "Delivered means confirmed"): a client's
 * publishes to one broker share one connection, opened on first use under a connect deadline,
 * reused, and closed once unused for `idleMs`. A connection that fails or misses a deadline is
 * dropped (closed, forgotten), so the next attempt opens a fresh one: a broker that stalls or
 * drops the connection costs a retryable failure and never holds a slot past its deadline.
 * One client's connections are never another's (the key names the client).
 */
export interface ConnectionCacheOptions<C> {
  /** Closes a connection; errors are ignored (the connection is being let go). */
  close: (conn: C) => Promise<unknown> | unknown;
  /** Unused this long, a connection is closed (default 60 s). */
  idleMs?: number;
  /** Connections kept at once; past it the longest idle is closed (default 1,000). */
  maxOpen?: number;
  timers?: Timers;
}

interface Entry<C> {
  opening: Promise<C>;
  conn: C | null;
  users: number;
  lastUsed: number;
  idleTimer: unknown;
}

export class ConnectionCache<C> {
  private readonly entries = new Map<string, Entry<C>>();
  private readonly idleMs: number;
  private readonly maxOpen: number;
  private readonly timers: Timers;

  constructor(private readonly opts: ConnectionCacheOptions<C>) {
    this.idleMs = opts.idleMs ?? 60_000;
    this.maxOpen = opts.maxOpen ?? 1_000;
    this.timers = opts.timers ?? systemTimers;
  }

  /** Connections open or opening now. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Runs `work` on the key's connection, opening it with `open` first when there is none (under
   * `connectMs`, named `what`). A failure of either drops the connection, then rethrows.
   */
  async use<T>(
    key: string,
    what: string,
    connectMs: number,
    open: (signal: AbortSignal) => Promise<C>,
    work: (conn: C) => Promise<T>,
  ): Promise<T> {
    const entry = this.entries.get(key) ?? this.openEntry(key, what, connectMs, open);
    entry.users += 1;
    try {
      const conn = await entry.opening;
      return await work(conn);
    } catch (err) {
      this.drop(key, entry);
      throw err;
    } finally {
      entry.users -= 1;
      entry.lastUsed = this.timers.now();
      // One idle timer per connection, armed when it falls idle and left running while it is used
      // again (closeIdle looks at its last use): not a timer cleared and set again per publish.
      if (entry.users === 0 && entry.idleTimer === null && this.entries.get(key) === entry)
        entry.idleTimer = this.timers.setTimeout(() => this.closeIdle(key, entry), this.idleMs);
    }
  }

  /** Forgets the key's connection if it is `entry` (a newer one stays), and closes it. */
  drop(key: string, entry = this.entries.get(key)): void {
    if (!entry) return;
    if (this.entries.get(key) === entry) this.entries.delete(key);
    if (entry.idleTimer !== null) this.timers.clearTimeout(entry.idleTimer);
    entry.idleTimer = null;
    entry.opening.then(
      (conn) => Promise.resolve(this.opts.close(conn)).catch(() => {}),
      () => {},
    );
  }

  /** Drops the connection of a key whose broker reported it gone (a close or error event). */
  forget(key: string, conn: C): void {
    const entry = this.entries.get(key);
    if (entry && entry.conn === conn) this.drop(key, entry);
  }

  /** Closes every connection (shutdown). */
  async closeAll(): Promise<void> {
    const all = [...this.entries.entries()];
    for (const [key, entry] of all) this.drop(key, entry);
    await Promise.all(all.map(([, e]) => e.opening.then((c) => this.opts.close(c)).catch(() => {})));
  }

  private openEntry(key: string, what: string, connectMs: number, open: (signal: AbortSignal) => Promise<C>): Entry<C> {
    if (this.entries.size >= this.maxOpen) this.evictIdlest();
    const deadline = startDeadline(connectMs, { what: `connecting to ${what}`, timers: this.timers });
    const connecting = open(deadline.signal);
    const entry: Entry<C> = {
      // A connection that arrives after its deadline is closed, never used nor leaked.
      opening: raceSignal(connecting, deadline.signal, () => {
        connecting.then(
          (late) => Promise.resolve(this.opts.close(late)).catch(() => {}),
          () => {},
        );
      }).finally(() => deadline.dispose()),
      conn: null,
      users: 0,
      lastUsed: this.timers.now(),
      idleTimer: null,
    };
    entry.opening.then(
      (conn) => {
        entry.conn = conn;
      },
      () => {},
    );
    this.entries.set(key, entry);
    return entry;
  }

  /** Closes a connection unused for idleMs; one used since its timer was armed gets the rest of its idle time. */
  private closeIdle(key: string, entry: Entry<C>): void {
    entry.idleTimer = null;
    // In use: the last user to finish arms the timer again.
    if (entry.users > 0 || this.entries.get(key) !== entry) return;
    const idleFor = this.timers.now() - entry.lastUsed;
    if (idleFor >= this.idleMs) this.drop(key, entry);
    else entry.idleTimer = this.timers.setTimeout(() => this.closeIdle(key, entry), this.idleMs - idleFor);
  }

  private evictIdlest(): void {
    let idlest: [string, Entry<C>] | null = null;
    for (const pair of this.entries)
      if (pair[1].users === 0 && (!idlest || pair[1].lastUsed < idlest[1].lastUsed)) idlest = pair;
    if (idlest) this.drop(idlest[0], idlest[1]);
  }
}

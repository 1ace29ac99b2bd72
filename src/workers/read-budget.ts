import type { Clock } from "../clock.js";
import type { Store } from "../store/store.js";

const WINDOW_MS = 60_000;
/**
 * Our window is a second longer than the upstream's, so clock skew between the two and request
 * transit cannot make the upstream count more reads in its minute than we counted in ours.
 */
const SAFETY_MS = 1_000;

/**
 * Sliding-window budget of upstream task reads (single and list), per upstream account.
 * Every read is recorded in the store before it is made, so a restart within the minute still sees
 * the reads already spent; the window is a log of timestamps, so no 60-second window can ever
 * hold more than `perMinute` reads (a token bucket would allow a burst at the boundary).
 * An account's window is loaded from the store once (`load`); after that the checks are in memory.
 */
export class ReadBudget {
  private readonly windows = new Map<string, number[]>();
  private readonly pausedUntil = new Map<string, number>();
  private lastPrune = 0;
  /** The window reads are counted over: the upstream's minute and the safety second. */
  readonly windowMs = WINDOW_MS + SAFETY_MS;

  constructor(
    private readonly store: Pick<Store, "accounts">,
    private readonly clock: Clock,
    readonly perMinute: number,
  ) {}

  /** Loads an account's reads of the last minute and its stored pause (once; later calls are free). */
  async load(account: string): Promise<void> {
    if (this.windows.has(account)) return;
    const now = this.clock.now();
    const [reads, state] = await Promise.all([
      this.store.accounts.readsSince(account, now - this.windowMs),
      this.store.accounts.state(account),
    ]);
    if (this.windows.has(account)) return;
    this.windows.set(account, reads);
    if (state?.readsPausedUntil) this.pausedUntil.set(account, state.readsPausedUntil);
  }

  private window(account: string, now: number): number[] {
    const reads = this.windows.get(account);
    // Not loaded yet: no reads known here (available() says 0 until load() has run).
    if (!reads) return [];
    const cutoff = now - this.windowMs;
    let drop = 0;
    while (drop < reads.length && reads[drop]! <= cutoff) drop++;
    if (drop > 0) reads.splice(0, drop);
    return reads;
  }

  /** Reads that may be made now. */
  available(account: string): number {
    if (!this.windows.has(account)) return 0;
    const now = this.clock.now();
    const reads = this.window(account, now);
    if ((this.pausedUntil.get(account) ?? 0) > now) return 0;
    return Math.max(0, this.perMinute - reads.length);
  }

  /** Spends one read if the budget allows; the caller makes the read only when this returns true. */
  async take(account: string): Promise<boolean> {
    await this.load(account);
    if (this.available(account) <= 0) return false;
    const now = this.clock.now();
    // Counted at once (in memory, before any await) so concurrent takers here cannot overspend; the
    // store then decides for every process sharing it, and records the read before it is made.
    const window = this.window(account, now);
    window.push(now);
    if (!(await this.store.accounts.takeRead(account, now, this.perMinute, this.windowMs))) {
      // Another process spent it: this window undercounts, so reload it from the store next time.
      window.splice(window.indexOf(now), 1);
      this.windows.delete(account);
      return false;
    }
    if (now - this.lastPrune > WINDOW_MS) {
      this.lastPrune = now;
      for (const known of this.windows.keys()) await this.store.accounts.pruneReads(known, now - 2 * WINDOW_MS);
    }
    return true;
  }

  /** The upstream said 429: no reads for this account until then. */
  async pause(account: string, untilMs: number): Promise<void> {
    // Loads the stored state first: after a restart, a longer pause already stored must not be shortened.
    await this.load(account);
    const current = this.pausedUntil.get(account) ?? 0;
    if (untilMs <= current) return;
    this.pausedUntil.set(account, untilMs);
    await this.store.accounts.updateState(account, { readsPausedUntil: untilMs }, this.clock.now());
  }

  /** When `n` reads (default one) become possible at once. */
  nextAvailableAt(account: string, n = 1): number {
    const now = this.clock.now();
    const reads = this.window(account, now);
    const paused = this.pausedUntil.get(account) ?? 0;
    const keep = Math.max(0, this.perMinute - Math.min(n, this.perMinute));
    // The reads above `keep` must leave the window: the newest of them is reads[length - keep - 1].
    const windowFree = reads.length <= keep ? now : reads[reads.length - keep - 1]! + this.windowMs + 1;
    return Math.max(paused, windowFree);
  }

  /** Reads spent in the last `ms` (at most the window), as this process knows them: sweeps pace on it. */
  readsInLast(account: string, ms: number): number {
    const now = this.clock.now();
    const reads = this.window(account, now);
    const since = now - ms;
    let n = 0;
    for (let i = reads.length - 1; i >= 0 && reads[i]! > since; i--) n++;
    return n;
  }

  /** Reads spent and allowed per account, for the accounts seen so far (metrics). */
  snapshot(): { account: string; used: number; budget: number }[] {
    return [...this.windows.keys()].map((account) => ({ account, used: this.used(account), budget: this.perMinute }));
  }

  /** Reads spent in the last minute (for metrics). */
  used(account: string): number {
    return this.window(account, this.clock.now()).length;
  }
}

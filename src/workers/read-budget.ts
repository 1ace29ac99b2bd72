import type { Clock } from "../clock.js";
import type { Db } from "../db/open.js";
import { getAccountState, pruneReads, readsSince, recordRead, upsertAccountState } from "../db/upstream.js";

const WINDOW_MS = 60_000;
/**
 * Our window is a second longer than the upstream's, so clock skew between the two and request
 * transit cannot make the upstream count more reads in its minute than we counted in ours.
 */
const SAFETY_MS = 1_000;

/**
 * Sliding-window budget of upstream task reads (single and list), per upstream account.
 * Every read is recorded in SQLite before it is made, so a restart within the minute still sees
 * the reads already spent; the window is a log of timestamps, so no 60-second window can ever
 * hold more than `perMinute` reads (a token bucket would allow a burst at the boundary).
 */
export class ReadBudget {
  private readonly windows = new Map<string, number[]>();
  private readonly pausedUntil = new Map<string, number>();
  private lastPrune = 0;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    readonly perMinute: number,
  ) {}

  private window(account: string, now: number): number[] {
    let reads = this.windows.get(account);
    if (!reads) {
      reads = readsSince(this.db, account, now - WINDOW_MS - SAFETY_MS);
      this.windows.set(account, reads);
      const state = getAccountState(this.db, account);
      if (state?.readsPausedUntil) this.pausedUntil.set(account, state.readsPausedUntil);
    }
    const cutoff = now - WINDOW_MS - SAFETY_MS;
    let drop = 0;
    while (drop < reads.length && reads[drop]! <= cutoff) drop++;
    if (drop > 0) reads.splice(0, drop);
    return reads;
  }

  /** Reads that may be made now. */
  available(account: string): number {
    const now = this.clock.now();
    const reads = this.window(account, now);
    if ((this.pausedUntil.get(account) ?? 0) > now) return 0;
    return Math.max(0, this.perMinute - reads.length);
  }

  /** Spends one read if the budget allows; the caller makes the read only when this returns true. */
  take(account: string): boolean {
    if (this.available(account) <= 0) return false;
    const now = this.clock.now();
    this.window(account, now).push(now);
    recordRead(this.db, account, now);
    if (now - this.lastPrune > WINDOW_MS) {
      this.lastPrune = now;
      for (const known of this.windows.keys()) pruneReads(this.db, known, now - 2 * WINDOW_MS);
    }
    return true;
  }

  /** The upstream said 429: no reads for this account until then. */
  pause(account: string, untilMs: number): void {
    // Loads the stored state first: after a restart, a longer pause already stored must not be shortened.
    this.window(account, this.clock.now());
    const current = this.pausedUntil.get(account) ?? 0;
    if (untilMs <= current) return;
    this.pausedUntil.set(account, untilMs);
    upsertAccountState(this.db, account, { readsPausedUntil: untilMs }, this.clock.now());
  }

  /** When the next read becomes possible. */
  nextAvailableAt(account: string): number {
    const now = this.clock.now();
    const reads = this.window(account, now);
    const paused = this.pausedUntil.get(account) ?? 0;
    const windowFree = reads.length < this.perMinute ? now : reads[reads.length - this.perMinute]! + WINDOW_MS + SAFETY_MS + 1;
    return Math.max(paused, windowFree);
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

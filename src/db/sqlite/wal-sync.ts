import { closeSync, fdatasync, fdatasyncSync, openSync } from "node:fs";

/** What a waiter runs once its commit is on disk (null) or the sync failed. */
type Settle = (err: Error | null) => void;

/**
 * Syncs in flight at once. A commit's sync starts at once while fewer run (a commit made just after
 * one started does not wait for it to end, then for its own: two fsyncs' time); past that, commits
 * share the next sync that starts (a group fsync).
 */
const MAX_IN_FLIGHT = 2;

/**
 * The WAL's fsync off the event loop. With `synchronous = FULL` every COMMIT fsyncs the WAL on the
 * thread that commits: 10-32 ms per group commit on a busy machine (bench/big-outputs.mjs, issue #38
 * item 7), during which the whole event loop waits. A group commit instead commits with
 * `synchronous = NORMAL` (frames written, not synced) and settles its units only once an fdatasync
 * of the WAL file, started after that COMMIT, has returned on the libuv thread pool: a caller is still
 * answered only after its rows are on disk, and the loop serves other requests meanwhile.
 *
 * Waiters settle in the order they were queued, each only after a sync that began after its commit
 * returned (a sync covers every write made before it began, so one ending settles all earlier waiters).
 */
export class WalSync {
  private fd: number | null = null;
  /** Waiters not settled yet, in order; `covered` of them (a prefix) have a sync running for them. */
  private waiting: Settle[] = [];
  private covered = 0;
  private inFlight = 0;

  constructor(
    private readonly walPath: string,
    private readonly sync: (fd: number, done: (err: Error | null) => void) => void = fdatasync,
  ) {}

  /** Runs `settle` once the WAL as written now is on disk (or the sync failed: `settle(err)`). */
  afterSync(settle: Settle): void {
    this.waiting.push(settle);
    if (this.inFlight < MAX_IN_FLIGHT) this.start();
  }

  /** Syncs here and settles every waiter now: the store is closing. */
  drain(): void {
    const waiting = this.waiting;
    this.waiting = [];
    this.covered = 0;
    let error: Error | null = null;
    try {
      if (waiting.length > 0) fdatasyncSync(this.open());
    } catch (err) {
      error = err as Error;
    }
    for (const settle of waiting) settle(error);
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private open(): number {
    // Opened once the WAL exists (after the first commit); the same inode for the connection's life.
    this.fd ??= openSync(this.walPath, "r");
    return this.fd;
  }

  private start(): void {
    // This sync covers every waiter queued so far: their commits returned before it begins.
    const upTo = this.waiting.length;
    const batch = this.waiting.slice(0, upTo);
    this.covered = upTo;
    let fd: number;
    try {
      fd = this.open();
    } catch (err) {
      this.done(batch, err as Error);
      return;
    }
    this.inFlight++;
    this.sync(fd, (err) => {
      this.inFlight--;
      this.done(batch, err);
      if (this.waiting.length > this.covered && this.inFlight < MAX_IN_FLIGHT) this.start();
    });
  }

  /** Settles, in order, the waiters up to the last of `batch` still waiting (earlier ones are covered too). */
  private done(batch: Settle[], err: Error | null): void {
    const last = batch[batch.length - 1];
    const end = last === undefined ? -1 : this.waiting.indexOf(last);
    // drain() or a later sync settled them meanwhile.
    if (end < 0) return;
    const settled = this.waiting.splice(0, end + 1);
    this.covered = Math.max(0, this.covered - settled.length);
    for (const settle of settled) settle(err);
  }
}

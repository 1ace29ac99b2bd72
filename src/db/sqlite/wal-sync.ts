import { closeSync, fdatasync, fdatasyncSync, openSync } from "node:fs";

/** What a waiter runs once its commit is on disk (null) or the sync failed. */
type Settle = (err: Error | null) => void;

/**
 * The WAL's fsync off the event loop. With `synchronous = FULL` every COMMIT fsyncs the WAL on the
 * thread that commits: 10-32 ms per group commit on a busy machine (bench/big-outputs.mjs, issue #38
 * item 7), during which the whole event loop waits. A group commit instead commits with
 * `synchronous = NORMAL` (frames written, not synced) and settles its units only once an fdatasync
 * of the WAL file, started after that COMMIT, has returned on the libuv thread pool: a caller is still
 * answered only after its rows are on disk, and the loop serves other requests meanwhile.
 *
 * One fdatasync in flight at a time: commits made while it runs share the next one (a group fsync).
 * Waiters settle in the order they were queued, each only after a sync that began after its commit.
 */
export class WalSync {
  private fd: number | null = null;
  /** Waiters whose commit a running sync covers, and those that wait for the next one. */
  private running: Settle[] | null = null;
  private next: Settle[] = [];

  constructor(
    private readonly walPath: string,
    private readonly sync: (fd: number, done: (err: Error | null) => void) => void = fdatasync,
  ) {}

  /** Runs `settle` once the WAL as written now is on disk (or the sync failed: `settle(err)`). */
  afterSync(settle: Settle): void {
    this.next.push(settle);
    if (this.running === null) this.start();
  }

  /** Syncs here and settles every waiter now: the store is closing. */
  drain(): void {
    const waiting = [...(this.running ?? []), ...this.next];
    this.running = null;
    this.next = [];
    let error: Error | null = null;
    try {
      if (waiting.length > 0) fdatasyncSync(this.open());
    } catch (err) {
      error = err as Error;
    }
    this.settle(waiting, error);
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private open(): number {
    // Opened once the WAL exists (after the first commit); the same inode for the connection's life.
    this.fd ??= openSync(this.walPath, "r");
    return this.fd;
  }

  private start(): void {
    const batch = this.next;
    this.next = [];
    this.running = batch;
    let fd: number;
    try {
      fd = this.open();
    } catch (err) {
      this.running = null;
      this.settle(batch, err as Error);
      return;
    }
    this.sync(fd, (err) => {
      // drain() settled them meanwhile.
      if (this.running !== batch) return;
      this.running = null;
      this.settle(batch, err);
      if (this.next.length > 0) this.start();
    });
  }

  private settle(waiters: Settle[], err: Error | null): void {
    for (const settle of waiters) settle(err);
  }
}

import type Database from "better-sqlite3";
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import { LOWER_THREAD_PRIORITY } from "../../background-thread.js";

/**
 * WAL checkpoints off the event loop (issue #38 item 7). SQLite runs an automatic checkpoint on the
 * connection that commits once the WAL passes 1000 pages (about 4 MB): on the server that is the
 * main thread, which then copies the WAL's pages into the database file and fsyncs it — 10-16 ms
 * per 4 MB here, and a 7 MB output crosses the mark twice. So the server's connection checkpoints
 * never (`wal_autocheckpoint = 0`) and a worker thread with a connection of its own to the same file
 * checkpoints instead, on a timer.
 *
 * PASSIVE only: it copies what no reader still needs and never waits for, or blocks, a writer, so
 * the main thread never sleeps in SQLite's busy handler behind it. A WAL fully copied is restarted
 * from its start by the next commit, and `journal_size_limit` truncates a file a burst left large,
 * so the WAL stays bounded while the checkpointer runs. A checkpointer that fails or exits hands
 * checkpoints back to the main connection (automatic again): slower turns, never an unbounded WAL.
 */

/** How often the worker checkpoints: at most this much of the write rate piles up in the WAL between two. */
export const CHECKPOINT_INTERVAL_MS = 100;
/** SQLite's default automatic checkpoint (pages), restored on the main connection when the checkpointer is gone. */
const AUTOCHECKPOINT_PAGES = 1000;
/** The WAL file is truncated to this after a burst (bytes): bounded on disk, not reallocated every restart. */
const JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024;

/**
 * The worker's whole program (CommonJS, eval'd: it runs the same under the build and the test
 * runner). It opens the file without migrating, checkpoints on each tick and on each "now" message,
 * and closes its connection when asked to stop.
 */
const WORKER_SOURCE = `${LOWER_THREAD_PRIORITY}
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.path);
db.pragma("busy_timeout = 0");
const checkpoint = () => db.pragma("wal_checkpoint(PASSIVE)")[0];
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on("message", (message) => {
  if (message === "now") {
    const row = checkpoint();
    return parentPort.postMessage({ log: row.log, checkpointed: row.checkpointed });
  }
  if (message !== "stop") return;
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

/** What one checkpoint reported: frames in the WAL, and how many of them are in the database file. */
export interface CheckpointReport {
  log: number;
  checkpointed: number;
}

export class Checkpointer {
  private readonly worker: Worker;
  private stopping = false;
  private readonly exited: Promise<void>;
  /** Callers of now(), in the order asked: the worker answers its messages in order. */
  private readonly asked: Array<(report: CheckpointReport | null) => void> = [];

  constructor(
    private readonly sqlite: Database.Database,
    options: { intervalMs?: number } = {},
  ) {
    sqlite.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT}`);
    sqlite.pragma("wal_autocheckpoint = 0");
    const driver = createRequire(import.meta.url).resolve("better-sqlite3");
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { driver, path: sqlite.name, intervalMs: options.intervalMs ?? CHECKPOINT_INTERVAL_MS },
    });
    // Never the reason the process stays up: the server's own handles keep it running.
    this.worker.unref();
    this.worker.on("message", (report: CheckpointReport) => this.asked.shift()?.(report));
    this.worker.on("error", () => this.handBack());
    this.exited = new Promise((resolve) => this.worker.once("exit", () => resolve()));
    void this.exited.then(() => this.handBack());
  }

  /** A checkpoint now rather than at the next tick, and what it did; null when the checkpointer is gone. */
  now(): Promise<CheckpointReport | null> {
    if (this.stopping) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.asked.push(resolve);
      this.worker.postMessage("now");
    });
  }

  /** Closes the worker's connection and waits for the thread to end; the main connection checkpoints again. */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      // Held until it exits: an unreferenced thread alone would let the process end mid-shutdown,
      // before whatever the caller does after close().
      this.worker.ref();
      this.worker.postMessage("stop");
    }
    await this.exited;
  }

  /** The checkpointer is gone: the main connection checkpoints for itself again (unless it is closed). */
  private handBack(): void {
    for (const resolve of this.asked.splice(0)) resolve(null);
    if (this.sqlite.open) this.sqlite.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
  }
}

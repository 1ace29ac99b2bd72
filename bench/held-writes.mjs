// What the event loop's SQLite commits wait while another thread writes a long output's pieces
// (issue #38 item 7, thirteenth round): the writer at nice 10 (the parse worker, as it writes held pieces)
// against the writer at the process's priority (a piece writer thread, tried and not kept), and with no
// writer at all (the commits' own time).
//
//   node bench/held-writes.mjs        (BENCH_ROUNDS, default 3; BENCH_HELD_MS per variant and
//                                      round, default 5000; BENCH_HELD_HOGS=<n>: n busy-looping
//                                      processes beside it for the run, default 0)
//
// One SQLite file in WAL mode. A worker thread inserts pieces of 64 Ki characters, one per
// transaction, one per request from this thread (as the relay's parse worker does, synchronous =
// NORMAL, busy_timeout 5 s). Meanwhile this thread commits a small transaction (20 rows) every 5 ms,
// as a group commit's flush does, with synchronous = NORMAL, and times each: a commit that finds the
// write lock taken sleeps in SQLite's busy handler (1, 2, 5, 10, 15, 20, 25 ms ...) until it is free.
// Per variant: the commits' p99 and max wall time, and their time over 5 ms in all. The variants
// alternate within each round; medians over the rounds; the load average at the start and end.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { median, round } from "./lib/stats.mjs";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3");
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MS = Number(process.env.BENCH_HELD_MS ?? 5000);
const HOGS = Number(process.env.BENCH_HELD_HOGS ?? 0);
const PIECE = "x".repeat(64 * 1024);

const WRITER = `
const { parentPort, workerData } = require("node:worker_threads");
if (workerData.nice !== null && workerData.nice > 0) {
  const tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
  require("node:os").setPriority(tid, workerData.nice);
}
const db = new (require(workerData.driver))(workerData.file);
db.pragma("busy_timeout = 5000");
db.pragma("synchronous = NORMAL");
const insert = db.prepare("INSERT INTO pieces (ref, seq, text) VALUES (?, ?, ?)");
parentPort.on("message", (m) => {
  if (m === "close") return void (db.close(), parentPort.close());
  insert.run(m.ref, m.seq, workerData.piece);
  parentPort.postMessage(m.seq);
});
`;

async function variant(file, nice) {
  const worker = new Worker(WRITER, {
    eval: true,
    workerData: { file, nice, driver: require.resolve("better-sqlite3"), piece: PIECE },
  });
  const db = new Database(file);
  db.pragma("busy_timeout = 5000");
  db.pragma("synchronous = NORMAL");
  const insert = db.prepare("INSERT INTO rows (v) VALUES (?)");
  const commit = db.transaction(() => {
    for (let i = 0; i < 20; i++) insert.run(i);
  });
  const waits = [];
  const ticker = setInterval(() => {
    const t0 = performance.now();
    commit();
    waits.push(performance.now() - t0);
  }, 5);
  // Pieces back to back, one request at a time, as OffThreadJson asks the parse worker.
  const end = Date.now() + MS;
  const ref = `out_${nice}_${Date.now()}`;
  let seq = 0;
  if (nice === null) await new Promise((resolve) => setTimeout(resolve, MS));
  while (nice !== null && Date.now() < end) {
    worker.postMessage({ ref, seq });
    await new Promise((resolve) => worker.once("message", resolve));
    seq++;
  }
  clearInterval(ticker);
  worker.postMessage("close");
  await new Promise((resolve) => worker.once("exit", resolve));
  db.prepare("DELETE FROM pieces").run();
  db.close();
  waits.sort((a, b) => a - b);
  return {
    commits: waits.length,
    pieces: seq,
    p99_ms: round(waits[Math.floor(waits.length * 0.99)] ?? 0, 1),
    max_ms: round(waits.at(-1) ?? 0, 1),
    over_5ms_total_ms: round(
      waits.filter((w) => w > 5).reduce((a, b) => a + b, 0),
      0,
    ),
  };
}

const dir = mkdtempSync(join(os.tmpdir(), "genrelay-held-writes-"));
const file = join(dir, "w.db");
const setup = new Database(file);
setup.pragma("journal_mode = WAL");
setup.exec(
  "CREATE TABLE pieces (ref TEXT, seq INTEGER, text TEXT, PRIMARY KEY (ref, seq)); CREATE TABLE rows (v INTEGER)",
);
setup.close();
const hogs = Array.from({ length: HOGS }, () => spawn(process.execPath, ["-e", "for(;;){}"], { stdio: "ignore" }));
const load_start = os.loadavg().map((x) => round(x, 2));
const variants = { none: null, nice10: 10, nice0: 0 };
const rows = { none: [], nice10: [], nice0: [] };
try {
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? Object.keys(variants) : Object.keys(variants).reverse();
    for (const name of order) {
      const result = await variant(file, variants[name]);
      console.log(`  round ${r + 1} ${name}: ${JSON.stringify(result)}`);
      rows[name].push(result);
    }
  }
} finally {
  for (const h of hogs) h.kill();
  rmSync(dir, { recursive: true, force: true });
}
const med = (xs, f) => round(median(xs.map(f)), 1);
console.log(
  JSON.stringify(
    {
      method: `writer thread inserting 64 Ki-char pieces back to back; this thread commits 20 rows every 5 ms and times each; ${MS} ms per variant and round, ${ROUNDS} rounds, ${HOGS} busy-looping processes beside`,
      load_start,
      ...Object.fromEntries(
        Object.entries(rows).map(([name, xs]) => [
          name,
          {
            commit_p99_ms: med(xs, (x) => x.p99_ms),
            commit_max_ms: med(xs, (x) => x.max_ms),
            over_5ms_total_ms: med(xs, (x) => x.over_5ms_total_ms),
            pieces: med(xs, (x) => x.pieces),
          },
        ]),
      ),
      load_end: os.loadavg().map((x) => round(x, 2)),
    },
    null,
    2,
  ),
);

// SQLite statements per delivered webhook, counted in-process: one build's Dispatcher (wired as
// bench/dispatcher-micro.mjs wires it, silent logger) drains N pre-written events of one client to
// one loopback receiver, and every run/get/all/iterate of a prepared better-sqlite3 statement is
// counted (BEGIN/COMMIT of the group commit are counted apart, as transactions: one per BEGIN,
// whoever runs it; until the seventh round a wrapper of `transaction` counted each twice), and timed: the
// wall time of each statement (COMMIT included, its fsync too) per webhook, the dearest first.
//   node bench/delivery-statements.mjs DIST [events]
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createClient } from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";

const dist = resolve(process.argv[2] ?? "dist");
const N = Number(process.argv[3] ?? 1000);
process.env.BENCH_DIST = dist;
const load = (rel) => import(pathToFileURL(join(dist, rel)).href);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-stmts-"));
// On every exit, a failed run's too.
process.on("exit", () => rmSync(tmp, { recursive: true, force: true }));
let hits = 0;
const receiver = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    hits++;
    res.end("ok");
  });
});
await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
await prepareSeeding();
const db = join(tmp, "s.db");
const { id } = await createClient(db, "stmts", dist);
seedPendingEvents(db, id, N, `http://127.0.0.1:${receiver.address().port}/hook`);

const { systemClock } = await load("clock.js");
const { loadConfig } = await load("config.js");
const { openDatabase } = await load("db/sqlite/open.js");
const { sqliteStore } = await load("open-store.js");
const { silentLogger } = await load("logger.js");
const { WebhookSender } = await load("webhooks/sender.js");
const { Dispatcher } = await load("workers/dispatcher.js");
const { WorkerLoop } = await load("workers/loop.js");
const { LeaseOwner } = await load("workers/owner.js");

const database = openDatabase(db);
const counts = { statements: 0, transactions: 0 };
/** Wall time and calls per statement (its first 80 characters). */
const timed = new Map();
const proto = Object.getPrototypeOf(database.sqlite.prepare("SELECT 1"));
for (const m of ["run", "get", "all", "iterate"]) {
  const native = proto[m];
  proto[m] = function (...args) {
    if (/^\s*(BEGIN|COMMIT)/i.test(this.source)) counts.transactions += /^\s*BEGIN/i.test(this.source) ? 1 : 0;
    else counts.statements++;
    const t0 = process.hrtime.bigint();
    try {
      return native.apply(this, args);
    } finally {
      const k = this.source.replace(/\s+/g, " ").slice(0, 80);
      const e = timed.get(k) ?? { calls: 0, ns: 0n };
      e.calls++;
      e.ns += process.hrtime.bigint() - t0;
      timed.set(k, e);
    }
  };
}
const config = loadConfig({ DATABASE_PATH: db, WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
const sender = new WebhookSender({ allowPrivateNetworks: true });
let done;
const finished = new Promise((r) => (done = r));
let settled = 0;
const dispatcher = new Dispatcher({
  store: sqliteStore(database),
  clock: systemClock,
  config,
  logger: silentLogger,
  sender,
  owner: new LeaseOwner(),
  onAttempt: () => {
    if (++settled >= N) done();
  },
});
const loop = new WorkerLoop({
  name: "dispatcher",
  clock: systemClock,
  logger: silentLogger,
  tick: () => dispatcher.tick(),
});
dispatcher.onSettled = () => loop.nudge();
const before = { ...counts };
timed.clear();
loop.start();
await finished;
await loop.stop();
await dispatcher.drain();
const per = (k) => Math.round(((counts[k] - before[k]) / hits) * 100) / 100;
process.stdout.write(
  `${JSON.stringify({ dist, webhooks: hits, statements_per_webhook: per("statements"), transactions_per_webhook: per("transactions") })}\n`,
);
const dearest = [...timed].sort((a, b) => Number(b[1].ns - a[1].ns)).slice(0, 12);
for (const [source, { calls, ns }] of dearest)
  process.stdout.write(
    `${(Number(ns) / 1e3 / hits).toFixed(1).padStart(7)} µs/webhook ${String(calls).padStart(6)} calls  ${source}\n`,
  );
await sender.close();
database.close();
receiver.close();
process.exit(0);

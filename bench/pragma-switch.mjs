// A group commit's switch of `synchronous` (src/db/sqlite/group-commit.ts, issue #43): each flush
// sets NORMAL before its COMMIT and FULL after it. Through better-sqlite3's pragma() (a Statement
// object, its result rows) against exec() (sqlite3_exec: compiled and run in C; PRAGMA synchronous
// takes effect as it is compiled, so a statement prepared once would not switch again). A file
// database in WAL mode; 200,000 switches a round; CPU per switch (user + system); order alternates;
// medians of the rounds; the load before and after.
//   node bench/pragma-switch.mjs [rounds=5]
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const N = 200_000;
const rounds = Number(process.argv[2] ?? 5);
const dir = mkdtempSync(join(os.tmpdir(), "pragma-switch-"));
const db = new Database(join(dir, "b.db"));
db.pragma("journal_mode = WAL");
const ways = {
  "pragma()": (full) => db.pragma(full ? "synchronous = FULL" : "synchronous = NORMAL"),
  "exec()": (full) => db.exec(full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL"),
};
const cpuPer = (switchOnce) => {
  const start = process.cpuUsage();
  for (let i = 0; i < N; i++) switchOnce((i & 1) === 1);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / N;
};
const loadBefore = loadAverage();
const figures = { "pragma()": [], "exec()": [] };
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? ["pragma()", "exec()"] : ["exec()", "pragma()"];
  for (const way of order) figures[way].push(cpuPer(ways[way]));
}
// Both leave the connection as asked.
ways["exec()"](false);
if (db.pragma("synchronous", { simple: true }) !== 1) throw new Error("exec() did not switch to NORMAL");
ways["exec()"](true);
if (db.pragma("synchronous", { simple: true }) !== 2) throw new Error("exec() did not switch to FULL");
db.close();
rmSync(dir, { recursive: true, force: true });
for (const [way, us] of Object.entries(figures))
  console.log(
    `${way.padEnd(9)} ${median(us).toFixed(2)} µs CPU a switch (rounds: ${us.map((u) => u.toFixed(2)).join(", ")})`,
  );
console.log(`load ${loadBefore} → ${loadAverage()}`);

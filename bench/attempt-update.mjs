// What the event's UPDATE of an attempt's record costs through db/sqlite/prepared.ts's updateWhere
// (issue #43, fourteenth round): 200,000 calls with a delivered attempt's patch on the relay's own
// database (migrated, WAL, no matching row: the statement's JS around SQLite is what differs),
// after 20,000 of warm-up, each build in a process of its own, alternated; CPU µs a call from
// process.cpuUsage(), medians, and the load.
//   node bench/attempt-update.mjs OLD_DIST NEW_DIST [rounds=3]
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const CALLS = 200_000;

async function child(dist, dir) {
  const load = (m) => import(pathToFileURL(resolve(dist, m)).href);
  const { openDatabase } = await load("db/sqlite/open.js");
  const { updateWhere } = await load("db/sqlite/prepared.js");
  const { events } = await load("db/sqlite/schema.js");
  const { db } = openDatabase(join(dir, "update.db"));
  const call = (i) =>
    updateWhere(
      db,
      events,
      {
        attempts: i,
        roundAttempts: 1,
        lastAttemptAt: i,
        lastStatusCode: 200,
        lastError: null,
        deliveryStatus: "succeeded",
        deliveredAt: i,
        nextAttemptAt: null,
        claimToken: null,
        claimedUntil: null,
      },
      ["id", "claimToken"],
      [`evt_${i}`, "own_x"],
    );
  for (let i = 0; i < 20_000; i++) call(i);
  const c0 = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) call(i);
  const c = process.cpuUsage(c0);
  process.stdout.write(`${(c.user + c.system) / CALLS}\n`);
}

if (process.argv[2] === "--child") await child(process.argv[3], process.argv[4]);
else {
  const [oldArg, newArg, roundsArg] = process.argv.slice(2);
  if (!oldArg || !newArg) throw new Error("usage: node bench/attempt-update.mjs OLD_DIST NEW_DIST [rounds]");
  const builds = { old: resolve(oldArg), new: resolve(newArg) };
  const out = { old: [], new: [] };
  const load0 = loadAverage();
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-update-"));
  try {
    for (let r = 0; r < Number(roundsArg ?? 3); r++)
      for (const name of r % 2 === 0 ? ["old", "new"] : ["new", "old"]) {
        const dir = mkdtempSync(join(tmp, `${name}-`));
        const us = execFileSync(process.execPath, [fileURLToPath(import.meta.url), "--child", builds[name], dir]);
        out[name].push(Number(String(us).trim()));
      }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  for (const name of ["old", "new"])
    console.log(
      `${name} ${median(out[name]).toFixed(2)} µs CPU a call (${out[name].map((x) => x.toFixed(2)).join(" / ")})`,
    );
  console.log(`load ${load0} → ${loadAverage()}`);
}

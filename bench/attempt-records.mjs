// What an attempt's record costs the store, per record, by how many share a commit (issue #43,
// delivery's tenth round): N pre-written events leased, then their records written through the
// store's own path (EventStore.recordAttempt: the records' unit, the attempts' group commit, its
// COMMIT and WAL sync), BATCH records queued in one turn and awaited before the next BATCH. Each
// build and batch size runs in a process of its own; CPU is the process's user + system time over
// the records (after 300 of warm-up). The builds' order rotates per round; medians, and the load.
//   node bench/attempt-records.mjs OLD_DIST NEW_DIST [rounds=3] [batches=6,32] [events=4000]
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadAverage } from "./lib/load-gate.mjs";

const WARM = 300;

async function child(dist, batch, n) {
  process.env.BENCH_DIST = dist;
  const { createClient } = await import("./lib/proc.mjs");
  const { prepareSeeding, seedPendingEvents } = await import("./lib/seed.mjs");
  await prepareSeeding();
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-records-"));
  const path = join(tmp, "r.db");
  const { id } = await createClient(path, "records", dist);
  seedPendingEvents(path, id, n, "http://127.0.0.1:9/hook");
  const load = (rel) => import(pathToFileURL(join(dist, rel)).href);
  const { openDatabase } = await load("db/sqlite/open.js");
  const { sqliteStore } = await load("open-store.js");
  const store = sqliteStore(openDatabase(path));
  const now = Date.now();
  const claimed = await store.events.claimDue({ now, leaseMs: 600_000, token: "tok", limit: n });
  let k = 0;
  const record = (e) =>
    store.events.recordAttempt(
      e.id,
      "tok",
      {
        id: `att_${k++}`,
        eventId: e.id,
        taskId: e.taskId,
        clientId: e.clientId,
        eventType: e.type,
        url: e.callbackUrl,
        attemptedAt: now,
        statusCode: 200,
        latencyMs: 3,
        outcome: "succeeded",
        error: null,
        responseBody: "ok",
      },
      {
        attempts: e.attempts + 1,
        roundAttempts: e.roundAttempts + 1,
        lastAttemptAt: now,
        lastStatusCode: 200,
        lastError: null,
        deliveryStatus: "delivered",
        nextAttemptAt: null,
        deliveredAt: now,
      },
    );
  const run = async (from, to) => {
    for (let i = from; i < to; i += batch) await Promise.all(claimed.slice(i, Math.min(i + batch, to)).map(record));
  };
  await run(0, WARM);
  const before = process.cpuUsage();
  await run(WARM, claimed.length);
  const cpu = process.cpuUsage(before);
  await store.close();
  rmSync(tmp, { recursive: true, force: true });
  process.stdout.write(`${JSON.stringify({ us: (cpu.user + cpu.system) / (claimed.length - WARM) })}\n`);
}

if (process.argv[2] === "--child") {
  await child(process.argv[3], Number(process.argv[4]), Number(process.argv[5]));
} else {
  const [oldArg, newArg, roundsArg, batchesArg, eventsArg] = process.argv.slice(2);
  if (!oldArg || !newArg)
    throw new Error("usage: node bench/attempt-records.mjs OLD_DIST NEW_DIST [rounds] [batches] [events]");
  const builds = { old: resolve(oldArg), new: resolve(newArg) };
  const rounds = Number(roundsArg ?? 3);
  const batches = (batchesArg ?? "6,32").split(",").map(Number);
  const events = Number(eventsArg ?? 4000);
  const self = fileURLToPath(import.meta.url);
  const loadStart = loadAverage();
  const results = {};
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? ["old", "new"] : ["new", "old"];
    for (const batch of batches)
      for (const build of order) {
        const out = spawnSync(process.execPath, [self, "--child", builds[build], String(batch), String(events)], {
          encoding: "utf8",
        });
        if (out.status !== 0) throw new Error(out.stderr);
        const { us } = JSON.parse(out.stdout.trim().split("\n").pop());
        (results[`${build} batch=${batch}`] ??= []).push(Number(us.toFixed(1)));
      }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  for (const [row, xs] of Object.entries(results))
    process.stdout.write(
      `${row.padEnd(16)} ${median(xs).toFixed(1).padStart(7)} µs CPU a record (${xs.join(" / ")})\n`,
    );
  process.stdout.write(`load ${loadStart.join(" ")} → ${loadAverage().join(" ")}\n`);
}

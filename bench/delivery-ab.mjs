// Delivery only, three processes side by side in one run: an old build of the relay, a new one,
// and bench/proto/delivery.mjs, each draining the same pre-written outbox (N due task.succeeded
// events of one client to one loopback receiver, 8 in flight per host), order rotated every round.
// Per process: webhooks/s at the receiver and CPU-ms per webhook (user + system from
// /proc/<pid>/stat, from readiness to the last webhook). Medians of the rounds, the load average
// beside each round. `node bench/delivery-ab.mjs OLD_DIST NEW_DIST [rounds] [events]`.
// Each dist must resolve this checkout's node_modules and have ../migrations beside it.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import {
  BENCH,
  countingReceiver,
  cpuMsOf,
  createClient,
  HELD_SIMULATOR_ENV,
  sleep,
  startNode,
  startRelay,
  startSimulator,
} from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";
import { median } from "./lib/stats.mjs";

const [oldArg, newArg, roundsArg, eventsArg] = process.argv.slice(2);
if (!oldArg || !newArg) throw new Error("usage: node bench/delivery-ab.mjs OLD_DIST NEW_DIST [rounds] [events]");
const [oldDist, newDist] = [resolve(oldArg), resolve(newArg)];
const ROUNDS = Number(roundsArg ?? 3);
const EVENTS = Number(eventsArg ?? 3000);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-dab-"));

const sim = await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist: newDist });
const receiver = await countingReceiver();
const { hook, seen } = receiver;

async function start(kind, db, tag) {
  if (kind === "proto") {
    const child = startNode(tag, join(BENCH, "proto", "delivery.mjs"), {
      env: { DATABASE_PATH: db },
      logFile: join(tmp, `${tag}.log`),
    });
    await child.waitFor(/proto-delivery ready/);
    return child;
  }
  return startRelay(
    {
      DATABASE_PATH: db,
      UPSTREAM_BASE_URL: sim.url,
      UPSTREAM_API_KEY: "sandbox",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    },
    join(tmp, `${tag}.log`),
    { dist: kind === "old" ? oldDist : newDist },
  );
}

async function delivery(kind, tag) {
  const db = join(tmp, `${tag}.db`);
  // Every database is migrated by the new build's CLI (the prototype has none of its own).
  const { id } = await createClient(db, "dab", kind === "old" ? oldDist : newDist);
  seedPendingEvents(db, id, EVENTS, hook);
  receiver.reset();
  const child = await start(kind, db, tag);
  const cpu0 = cpuMsOf(child.pid);
  const before = seen.hits;
  const deadline = Date.now() + 30_000;
  while (seen.hits < EVENTS && Date.now() < deadline) await sleep(50);
  const cpuMs = cpuMsOf(child.pid) - cpu0;
  await child.stop();
  return {
    rate: seen.hits > 1 ? ((seen.hits - 1) * 1000) / (seen.last - seen.first) : 0,
    cpu: seen.hits > before ? cpuMs / (seen.hits - before) : Number.NaN,
    complete: seen.hits >= EVENTS,
  };
}

await prepareSeeding();
const kinds = ["old", "new", "proto"];
const out = { old: [], new: [], proto: [] };
const loads = [];
const fmt = (x) => `${x.rate.toFixed(0)}/s ${x.cpu.toFixed(3)} CPU-ms${x.complete ? "" : " (incomplete)"}`;
for (let r = 0; r < ROUNDS; r++) {
  const order = kinds.map((_, i) => kinds[(i + r) % kinds.length]);
  for (const kind of order) out[kind].push(await delivery(kind, `${kind}-${r}`));
  const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  loads.push(load);
  process.stdout.write(
    `round ${r + 1} (${order.join(", ")}; load ${load}): ${kinds.map((k) => `${k} ${fmt(out[k].at(-1))}`).join(" | ")}\n`,
  );
}
const r3 = (x) => Math.round(x * 1000) / 1000;
const med = Object.fromEntries(
  kinds.map((k) => [
    k,
    { rate: Math.round(median(out[k].map((x) => x.rate))), cpu_ms: r3(median(out[k].map((x) => x.cpu))) },
  ]),
);
// Ratios are medians of the per-round ratios (each round's processes ran under the same load).
const ratio = (a, b) => r3(median(out[a].map((x, i) => x.cpu / out[b][i].cpu)));
process.stdout.write(
  `${JSON.stringify({ events: EVENTS, rounds: ROUNDS, loads, ...med, cpu_new_vs_old: ratio("new", "old"), cpu_new_vs_proto: ratio("new", "proto"), cpu_old_vs_proto: ratio("old", "proto") })}\n`,
);
await sim.stop();
receiver.close();
rmSync(tmp, { recursive: true, force: true });

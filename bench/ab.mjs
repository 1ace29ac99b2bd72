// A/B of two builds, side by side in one run (alternating, same machine load): intake (201s/s) and
// delivery (signed webhooks/s from a pre-written outbox), each with the relay process's CPU-ms per
// unit (user + system from /proc/<pid>/stat over the measured window). `node bench/ab.mjs OLD_DIST NEW_DIST [rounds]`.
// Used to check that a refactor did not slow the relay down; `npm run bench` has the full picture.
// Each dist must resolve this checkout's node_modules (a folder inside it) and have ../migrations beside it.
import autocannon from "autocannon";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import {
  countingReceiver,
  cpuMsOf,
  createClient,
  HELD_SIMULATOR_ENV,
  sleep,
  startRelay,
  startSimulator,
} from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";
import { median } from "./lib/stats.mjs";

const [oldArg, newArg, roundsArg] = process.argv.slice(2);
if (!oldArg || !newArg) throw new Error("usage: node bench/ab.mjs OLD_DIST NEW_DIST [rounds]");
const [oldDist, newDist] = [resolve(oldArg), resolve(newArg)];
const ROUNDS = Number(roundsArg ?? 3);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-ab-"));

const sim = await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist: newDist });
const receiver = await countingReceiver();
const { hook, seen } = receiver;

async function intake(dist, tag) {
  const db = join(tmp, `${tag}.db`);
  const { api_key } = await createClient(db, "ab", dist);
  const relay = await startRelay(
    { DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", UPSTREAM_MAX_CONCURRENT: 1 },
    join(tmp, `${tag}.log`),
    { dist },
  );
  let n = 0;
  const run = (duration) =>
    autocannon({
      url: relay.url,
      connections: 32,
      duration,
      requests: [
        {
          method: "POST",
          path: "/openapi/v1/images/generations",
          headers: { "content-type": "application/json", authorization: `Bearer ${api_key}` },
          body: JSON.stringify({
            model: "p-image",
            mode: "generate",
            prompt: "a lighthouse",
            count: 1,
            callback_url: "https://hooks.example.com/x",
          }),
          setupRequest: (req) => ({
            ...req,
            headers: { ...req.headers, "idempotency-key": `ab-${tag}-${String(n++).padStart(8, "0")}` },
          }),
        },
      ],
    });
  await run(2);
  const cpu0 = cpuMsOf(relay.pid);
  const r = await run(8);
  const cpuMs = cpuMsOf(relay.pid) - cpu0;
  await relay.stop();
  const accepted = r.statusCodeStats?.["201"]?.count ?? 0;
  return { rate: accepted / r.duration, cpu: accepted > 0 ? cpuMs / accepted : NaN };
}

async function delivery(dist, tag, events = 3000) {
  const db = join(tmp, `${tag}.db`);
  const { id } = await createClient(db, "ab", dist);
  seedPendingEvents(db, id, events, hook);
  receiver.reset();
  const relay = await startRelay(
    {
      DATABASE_PATH: db,
      UPSTREAM_BASE_URL: sim.url,
      UPSTREAM_API_KEY: "sandbox",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    },
    join(tmp, `${tag}.log`),
    { dist },
  );
  // CPU from readiness on, per webhook that arrived after it.
  const cpu0 = cpuMsOf(relay.pid);
  const before = seen.hits;
  const deadline = Date.now() + 15_000;
  while (seen.hits < events && Date.now() < deadline) await sleep(100);
  const cpuMs = cpuMsOf(relay.pid) - cpu0;
  await relay.stop();
  return {
    rate: seen.hits > 1 ? ((seen.hits - 1) * 1000) / (seen.last - seen.first) : 0,
    cpu: seen.hits > before ? cpuMs / (seen.hits - before) : NaN,
  };
}

await prepareSeeding();
const out = { intake: { old: [], new: [] }, delivery: { old: [], new: [] } };
const fmt = (x) => `${x.rate.toFixed(0)}/s ${x.cpu.toFixed(2)} CPU-ms`;
for (let r = 1; r <= ROUNDS; r++) {
  const order =
    r % 2
      ? [
          ["old", oldDist],
          ["new", newDist],
        ]
      : [
          ["new", newDist],
          ["old", oldDist],
        ];
  for (const [name, dist] of order) out.intake[name].push(await intake(dist, `i-${name}-${r}`));
  for (const [name, dist] of order) out.delivery[name].push(await delivery(dist, `d-${name}-${r}`));
  process.stdout.write(
    `round ${r}: intake old ${fmt(out.intake.old.at(-1))} new ${fmt(out.intake.new.at(-1))} | delivery old ${fmt(out.delivery.old.at(-1))} new ${fmt(out.delivery.new.at(-1))}\n`,
  );
}
const r3 = (x) => Math.round(x * 1000) / 1000;
// Rates per second and CPU-ms per unit (per 201 for intake, per webhook for delivery), medians of the rounds.
const summary = Object.fromEntries(
  Object.entries(out).map(([k, v]) => {
    const [rateOld, rateNew] = [median(v.old.map((x) => x.rate)), median(v.new.map((x) => x.rate))];
    const [cpuOld, cpuNew] = [median(v.old.map((x) => x.cpu)), median(v.new.map((x) => x.cpu))];
    return [
      k,
      {
        old: Math.round(rateOld),
        new: Math.round(rateNew),
        new_vs_old: r3(rateNew / rateOld),
        cpu_ms_old: r3(cpuOld),
        cpu_ms_new: r3(cpuNew),
        cpu_new_vs_old: r3(cpuNew / cpuOld),
      },
    ];
  }),
);
process.stdout.write(`${JSON.stringify(summary)}\n`);
await sim.stop();
receiver.close();
rmSync(tmp, { recursive: true, force: true });

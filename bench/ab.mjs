// A/B of two builds, side by side in one run (alternating, same machine load): intake (201s/s) and
// delivery (signed webhooks/s from a pre-written outbox). `node bench/ab.mjs OLD_DIST NEW_DIST [rounds]`.
// Used to check that a refactor did not slow the relay down; `npm run bench` has the full picture.
// Each dist must resolve this checkout's node_modules (a folder inside it) and have ../migrations beside it.
import autocannon from "autocannon";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { createClient, sleep, startRelay, startSimulator } from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";
import { median } from "./lib/stats.mjs";

const [oldArg, newArg, roundsArg] = process.argv.slice(2);
if (!oldArg || !newArg) throw new Error("usage: node bench/ab.mjs OLD_DIST NEW_DIST [rounds]");
const [oldDist, newDist] = [resolve(oldArg), resolve(newArg)];
const ROUNDS = Number(roundsArg ?? 3);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-ab-"));

const sim = await startSimulator({ SIM_API_KEYS: "sandbox", SIM_IMAGE_QUEUED_MS: 86_400_000, SIM_MAX_CONCURRENT: 100_000, SIM_READS_PER_MINUTE: 0 }, join(tmp, "sim.log"), { dist: newDist });

let hits = 0;
let first = 0;
let last = 0;
const receiver = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    const now = performance.now();
    if (hits === 0) first = now;
    last = now;
    hits++;
    res.end("ok");
  });
});
await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
const hook = `http://127.0.0.1:${receiver.address().port}/hook`;

async function intake(dist, tag) {
  const db = join(tmp, `${tag}.db`);
  const { api_key } = await createClient(db, "ab", dist);
  const relay = await startRelay({ DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", UPSTREAM_MAX_CONCURRENT: 1 }, join(tmp, `${tag}.log`), { dist });
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
          body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a lighthouse", count: 1, callback_url: "https://hooks.example.com/x" }),
          setupRequest: (req) => ({ ...req, headers: { ...req.headers, "idempotency-key": `ab-${tag}-${String(n++).padStart(8, "0")}` } }),
        },
      ],
    });
  await run(2);
  const r = await run(8);
  await relay.stop();
  return (r.statusCodeStats?.["201"]?.count ?? 0) / r.duration;
}

async function delivery(dist, tag, events = 3000) {
  const db = join(tmp, `${tag}.db`);
  const { id } = await createClient(db, "ab", dist);
  seedPendingEvents(db, id, events, hook);
  hits = 0;
  const relay = await startRelay({ DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }, join(tmp, `${tag}.log`), { dist });
  const deadline = Date.now() + 15_000;
  while (hits < events && Date.now() < deadline) await sleep(100);
  await relay.stop();
  return hits > 1 ? ((hits - 1) * 1000) / (last - first) : 0;
}

await prepareSeeding();
const out = { intake: { old: [], new: [] }, delivery: { old: [], new: [] } };
for (let r = 1; r <= ROUNDS; r++) {
  const order = r % 2 ? [["old", oldDist], ["new", newDist]] : [["new", newDist], ["old", oldDist]];
  for (const [name, dist] of order) out.intake[name].push(await intake(dist, `i-${name}-${r}`));
  for (const [name, dist] of order) out.delivery[name].push(await delivery(dist, `d-${name}-${r}`));
  process.stdout.write(`round ${r}: intake old ${out.intake.old.at(-1).toFixed(0)}/s new ${out.intake.new.at(-1).toFixed(0)}/s | delivery old ${out.delivery.old.at(-1).toFixed(0)}/s new ${out.delivery.new.at(-1).toFixed(0)}/s\n`);
}
const summary = Object.fromEntries(
  Object.entries(out).map(([k, v]) => [k, { old: Math.round(median(v.old)), new: Math.round(median(v.new)), new_vs_old: Math.round((median(v.new) / median(v.old)) * 1000) / 1000 }]),
);
process.stdout.write(`${JSON.stringify(summary)}\n`);
await sim.stop();
receiver.close();
rmSync(tmp, { recursive: true, force: true });

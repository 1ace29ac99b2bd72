// A/B of two builds, side by side in one run (alternating, same machine load): intake (201s/s) and
// delivery (signed webhooks/s from a pre-written outbox). `node bench/ab.mjs OLD_DIST NEW_DIST [rounds]`.
// Used to check that a refactor did not slow the relay down; `npm run bench` has the full picture.
import autocannon from "autocannon";
import { execFileSync, spawn } from "node:child_process";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { median } from "./lib/stats.mjs";

const [oldDist, newDist, roundsArg] = process.argv.slice(2);
if (!oldDist || !newDist) throw new Error("usage: node bench/ab.mjs OLD_DIST NEW_DIST [rounds]");
const ROUNDS = Number(roundsArg ?? 3);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-ab-"));

function start(script, env) {
  const child = spawn(process.execPath, [script], { env: { PATH: process.env.PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  return new Promise((resolve, reject) => {
    let buf = "";
    const onData = (d) => {
      buf += d;
      const m = /listening on (http:\/\/\S+)|"port":(\d+)[^\n]*"msg":"genrelay listening"/.exec(buf);
      if (m) resolve({ child, url: m[1] ?? `http://127.0.0.1:${m[2]}` });
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => reject(new Error(`${script} exited ${code}: ${buf.slice(-500)}`)));
  });
}
const stop = (p) => new Promise((r) => (p.child.once("exit", r), p.child.kill("SIGTERM")));

const sim = await start(join(newDist, "simulator", "main.js"), { SIM_PORT: "0", SIM_API_KEYS: "sandbox", SIM_IMAGE_QUEUED_MS: "86400000", SIM_MAX_CONCURRENT: "100000", SIM_READS_PER_MINUTE: "0", SIM_BALANCE: "1000000000000" });

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

function client(dist, dbPath) {
  return JSON.parse(execFileSync(process.execPath, [join(dist, "cli.js"), "clients", "create", "--name", "ab", "--json"], { env: { PATH: process.env.PATH, DATABASE_PATH: dbPath }, encoding: "utf8" }));
}

async function intake(dist, tag) {
  const db = join(tmp, `${tag}.db`);
  const { api_key } = client(dist, db);
  const relay = await start(join(dist, "main.js"), { PORT: "0", DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", UPSTREAM_MAX_CONCURRENT: "1", LOG_LEVEL: "info" });
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
  process.stderr.write(`intake ${tag}: warm-up\n`);
  await run(2);
  const r = await run(8);
  await stop(relay);
  return (r.statusCodeStats?.["201"]?.count ?? 0) / r.duration;
}

async function delivery(dist, tag, events = 3000) {
  const db = join(tmp, `${tag}.db`);
  const { id } = client(dist, db);
  const { seedPendingEvents, prepareSeeding } = await import("./lib/seed.mjs");
  await prepareSeeding();
  seedPendingEvents(db, id, events, hook);
  process.stderr.write(`delivery ${tag}: seeded\n`);
  hits = 0;
  const relay = await start(join(dist, "main.js"), { PORT: "0", DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", LOG_LEVEL: "info" });
  const deadline = Date.now() + 15_000;
  while (hits < events && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await stop(relay);
  return hits > 1 ? ((hits - 1) * 1000) / (last - first) : 0;
}

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
await stop(sim);
receiver.close();
rmSync(tmp, { recursive: true, force: true });

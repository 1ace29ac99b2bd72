// A/B of two builds, side by side in one run: intake (201s/s) and delivery (signed webhooks/s from a
// pre-written outbox), each with CPU-ms per unit. Used to check that a change did not make the relay
// dearer; `npm run bench` has the full picture.
//   node bench/ab.mjs OLD_DIST NEW_DIST [rounds=3] [--only=intake|delivery] [--profile]
// The outside harness's method (issue #43): CPU of every process of the relay (the relay and any
// child, user + system from /proc/<pid>/stat) over the measured window only; the order of the two
// builds rotated every round; medians of the rounds (at least 3 for a figure); the load average
// before and after every measurement; a round refused when the 1-minute load is above BENCH_MAX_LOAD
// (bench/lib/load-gate.mjs), and a row with a refused round printed as refused, with the loads.
// Both builds are copied under bench/.ab/ first (bench/lib/dist.mjs, stageDist), so they run on this
// checkout's node_modules and a rebuild during the run changes nothing.
// --profile: afterwards, each build once more under `node --cpu-prof` on the same fixed number of
// requests (with --only=delivery: webhooks of a 10,000-event outbox), and where its CPU went per
// unit (bench/lib/profile.mjs), old beside new.
import autocannon from "autocannon";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { removeSnapshot, stageDist } from "./lib/dist.mjs";
import { loadAverage, MAX_LOAD, quietEnough, refusedText } from "./lib/load-gate.mjs";
import {
  BENCH,
  countingReceiver,
  createClient,
  HELD_SIMULATOR_ENV,
  sleep,
  startRelay,
  startSimulator,
  treeCpuDelta,
  treeCpuSnapshot,
} from "./lib/proc.mjs";
import { findProfile, summariseProfile } from "./lib/profile.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";
import { median } from "./lib/stats.mjs";

const args = process.argv.slice(2);
const flags = args.filter((a) => a.startsWith("--"));
const [oldArg, newArg, roundsArg] = args.filter((a) => !a.startsWith("--"));
if (!oldArg || !newArg)
  throw new Error("usage: node bench/ab.mjs OLD_DIST NEW_DIST [rounds] [--only=intake|delivery] [--profile]");
const ROUNDS = Number(roundsArg ?? 3);
const ONLY = flags.find((f) => f.startsWith("--only="))?.slice("--only=".length);
const ROWS = ["intake", "delivery"].filter((row) => !ONLY || row === ONLY);
const PROFILE = flags.includes("--profile");
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-ab-"));
const builds = {};
// On every exit, a failed run's too: the staged builds and the databases.
process.on("exit", () => {
  for (const dist of Object.values(builds)) removeSnapshot(dirname(dist));
  rmSync(tmp, { recursive: true, force: true });
});
builds.old = stageDist(resolve(oldArg), "old");
builds.new = stageDist(resolve(newArg), "new");
const log = (line) => process.stdout.write(`${line}\n`);

const sim = await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist: builds.new });
const receiver = await countingReceiver();
const { hook, seen } = receiver;

const BODY = JSON.stringify({
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse",
  count: 1,
  callback_url: "https://hooks.example.com/x",
});

/** autocannon creations with a fresh Idempotency-Key each, for `duration` s or `amount` requests. */
function creations(url, apiKey, tag, { duration, amount }) {
  let n = 0;
  return autocannon({
    url,
    connections: 32,
    ...(amount ? { amount } : { duration }),
    requests: [
      {
        method: "POST",
        path: "/openapi/v1/images/generations",
        headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
        body: BODY,
        setupRequest: (req) => ({
          ...req,
          headers: { ...req.headers, "idempotency-key": `ab-${tag}-${String(n++).padStart(8, "0")}` },
        }),
      },
    ],
  });
}

async function intakeRelay(dist, tag, execArgv = []) {
  const db = join(tmp, `${tag}.db`);
  const { api_key } = await createClient(db, "ab", dist);
  const relay = await startRelay(
    { DATABASE_PATH: db, UPSTREAM_BASE_URL: sim.url, UPSTREAM_API_KEY: "sandbox", UPSTREAM_MAX_CONCURRENT: 1 },
    join(tmp, `${tag}.log`),
    { dist, execArgv },
  );
  return { relay, api_key };
}

async function intake(dist, tag) {
  const { relay, api_key } = await intakeRelay(dist, tag);
  await creations(relay.url, api_key, `${tag}-warm`, { duration: 2 });
  const cpu0 = treeCpuSnapshot(relay.pid);
  const r = await creations(relay.url, api_key, tag, { duration: 8 });
  const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(relay.pid));
  await relay.stop();
  const accepted = r.statusCodeStats?.["201"]?.count ?? 0;
  return { rate: accepted / r.duration, cpu: accepted > 0 ? cpuMs / accepted : Number.NaN };
}

async function delivery(dist, tag, events = 3000, execArgv = []) {
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
    { dist, execArgv },
  );
  // CPU from readiness on, per webhook that arrived after it.
  const cpu0 = treeCpuSnapshot(relay.pid);
  const before = seen.hits;
  const deadline = Date.now() + (execArgv.length > 0 ? 60_000 : 15_000);
  while (seen.hits < events && Date.now() < deadline) await sleep(100);
  const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(relay.pid));
  await relay.stop();
  return {
    rate: seen.hits > 1 ? ((seen.hits - 1) * 1000) / (seen.last - seen.first) : 0,
    cpu: seen.hits > before ? cpuMs / (seen.hits - before) : Number.NaN,
    hits: seen.hits - before,
    cpuMs,
  };
}

/**
 * One build under --cpu-prof on a fixed number of creations: where its CPU goes. The profile covers
 * the whole process (its start-up too, a few µs per request at this count).
 */
/**
 * One build under --cpu-prof draining a fixed outbox of pre-written events: where a webhook's CPU
 * goes. The profile covers the whole process (its start-up too, a few µs per webhook at this count).
 */
async function profileDelivery(name, events = 10_000) {
  const dir = join(tmp, `profile-d-${name}`);
  mkdirSync(dir, { recursive: true });
  const r = await delivery(builds[name], `pd-${name}`, events, ["--cpu-prof", `--cpu-prof-dir=${dir}`]);
  const file = findProfile(dir);
  if (!file) return { accepted: r.hits, cpu_ms: r.cpuMs, summary: null };
  const keep = join(BENCH, "profiles", `ab-delivery-${name}.cpuprofile`);
  mkdirSync(dirname(keep), { recursive: true });
  copyFileSync(file, keep);
  return { accepted: r.hits, cpu_ms: r.cpuMs, summary: summariseProfile(file, 25), file: keep };
}

async function profileIntake(name, requests = 20_000) {
  const dir = join(tmp, `profile-${name}`);
  mkdirSync(dir, { recursive: true });
  const { relay, api_key } = await intakeRelay(builds[name], `p-${name}`, ["--cpu-prof", `--cpu-prof-dir=${dir}`]);
  const cpu0 = treeCpuSnapshot(relay.pid);
  const r = await creations(relay.url, api_key, `p-${name}`, { amount: requests });
  const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(relay.pid));
  await relay.stop();
  const accepted = r.statusCodeStats?.["201"]?.count ?? 0;
  const file = findProfile(dir);
  if (!file) return { accepted, cpu_ms: cpuMs, summary: null };
  // Kept for a closer look (bench/profiles/ is git-ignored): open in Chrome DevTools or speedscope.
  const keep = join(BENCH, "profiles", `ab-intake-${name}.cpuprofile`);
  mkdirSync(dirname(keep), { recursive: true });
  copyFileSync(file, keep);
  return { accepted, cpu_ms: cpuMs, summary: summariseProfile(file, 25), file: keep };
}

await prepareSeeding();
const measure = { intake, delivery };
const out = Object.fromEntries(ROWS.map((row) => [row, { old: [], new: [], loads: [], refused: [] }]));
const fmt = (x) => `${x.rate.toFixed(0)}/s ${x.cpu.toFixed(3)} CPU-ms`;
const fixed = (load) => load.map((l) => l.toFixed(2)).join(" ");
for (let r = 1; r <= ROUNDS; r++) {
  // Old first in odd rounds, new first in even ones: a drift of the machine's load cancels out.
  const order = r % 2 ? ["old", "new"] : ["new", "old"];
  for (const row of ROWS) {
    const gate = await quietEnough({ log });
    const entry = out[row];
    if (!gate.ok) {
      entry.refused.push(gate.load[0]);
      log(`round ${r}: ${row} ${refusedText([gate.load[0]])}`);
      continue;
    }
    const loads = { before: gate.load };
    for (const name of order) entry[name].push(await measure[row](builds[name], `${row[0]}-${name}-${r}`));
    loads.after = loadAverage();
    entry.loads.push(loads);
    log(
      `round ${r}: ${row} old ${fmt(entry.old.at(-1))} new ${fmt(entry.new.at(-1))} (new ÷ old CPU ${(entry.new.at(-1).cpu / entry.old.at(-1).cpu).toFixed(3)}; load ${fixed(loads.before)} → ${fixed(loads.after)})`,
    );
  }
}
const r3 = (x) => Math.round(x * 1000) / 1000;
// Rates per second and CPU-ms per unit (per 201 for intake, per webhook for delivery), medians of the
// rounds; the ratio is the median of the per-round ratios (each round measures both builds back to back).
const summary = Object.fromEntries(
  Object.entries(out).map(([k, v]) => {
    if (v.refused.length > 0) return [k, { refused: refusedText(v.refused), max_load: MAX_LOAD, loads: v.loads }];
    const [rateOld, rateNew] = [median(v.old.map((x) => x.rate)), median(v.new.map((x) => x.rate))];
    const [cpuOld, cpuNew] = [median(v.old.map((x) => x.cpu)), median(v.new.map((x) => x.cpu))];
    return [
      k,
      {
        rounds: v.old.length,
        ...(v.old.length < 3 ? { note: "fewer than 3 rounds: not a figure" } : {}),
        old: Math.round(rateOld),
        new: Math.round(rateNew),
        new_vs_old: r3(rateNew / rateOld),
        cpu_ms_old: r3(cpuOld),
        cpu_ms_new: r3(cpuNew),
        cpu_new_vs_old: r3(median(v.new.map((x, i) => x.cpu / v.old[i].cpu))),
        load_1m: v.loads.map((l) => [l.before[0], l.after[0]]),
      },
    ];
  }),
);
log(JSON.stringify(summary));

if (PROFILE) {
  // Intake's profile unless only delivery is measured (--only=delivery --profile: the delivery's).
  const row = ONLY === "delivery" ? "delivery" : "intake";
  const unit = row === "delivery" ? "webhook" : "201";
  const profiles = {};
  for (const name of ["old", "new"])
    profiles[name] = row === "delivery" ? await profileDelivery(name) : await profileIntake(name);
  // µs of CPU per accepted creation or delivered webhook, by package and by function (self time), old beside new.
  const perRequest = (p, ms) => r3((ms * 1000) / Math.max(1, p.accepted));
  for (const part of ["by_package", "top_functions"]) {
    log(`\nprofile of ${row}, ${part} (self µs per ${unit}):`);
    const names = new Set(["old", "new"].flatMap((n) => profiles[n].summary?.[part].map((x) => x.name) ?? []));
    const cost = (n, name) => {
      const hit = profiles[n].summary?.[part].find((x) => x.name === name);
      return hit ? perRequest(profiles[n], hit.self_ms) : 0;
    };
    const rows = [...names].map((name) => [name, cost("old", name), cost("new", name)]);
    rows.sort((a, b) => b[2] + b[1] - (a[2] + a[1]));
    for (const [name, o, n] of rows.slice(0, 25)) log(`  ${String(o).padStart(8)} ${String(n).padStart(8)}  ${name}`);
  }
  for (const name of ["old", "new"])
    log(
      `${name}: ${profiles[name].accepted} ${unit}s, ${r3(profiles[name].cpu_ms / Math.max(1, profiles[name].accepted))} CPU-ms each under the profiler (${profiles[name].file})`,
    );
}
await sim.stop();
receiver.close();

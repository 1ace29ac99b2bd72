// genrelay benchmarks: `npm run bench` (builds dist/ first) or `node bench/run.mjs`.
//
// Every benchmark runs on loopback against the BUILT relay (`node dist/main.js`) as its own process,
// next to the upstream simulator (`node dist/simulator/main.js`) on its own port. Each ratio is
// measured in the same run as its baseline, over several rounds, and the median is quoted.
//
//   1. intake       accepted creations/s and latency (autocannon) vs a bare hono endpoint
//   2. delivery     signed webhooks/s to a loopback receiver vs plain undici POSTs of the same body
//   3. end to end   tasks/s through intake -> simulator (zero processing time) -> webhook, and latency
//   4. memory/scale RSS with tasks waiting and in flight; intake with 1,000,000 finished tasks vs empty;
//                   EXPLAIN QUERY PLAN of the hot queries
//   5. scheduling   poll scheduling in fake time (bench/scheduling.mjs)
//   7. postgres     intake with 1 and 2 instances on one PostgreSQL database, delivery (bench/postgres.mjs),
//                   all with durable commits (fsync=on, synchronous_commit=on)
//   9. prototypes   intake, delivery, CPU-ms per task end to end and PostgreSQL intake, each against a
//                   minimal prototype of the same durable work (bench/prototypes.mjs, bench/proto/)
//  10. scale-out   1, 2 and 3 instances on one durable PostgreSQL: delivery, intake and end to end, relay +
//                   PostgreSQL CPU per unit, statements, WAL, lock waits (bench/scaleout.mjs);
//                   BENCH_SCALEOUT_OLD_DIST=<dist of another commit> measures that build side by side
//  11. eta         estimated_completion_at against the real end on the simulator (bench/eta.mjs)
//  12. public      CPU per request of the public routes (JWKS, file link, a refused one) and a victim's
//                   completion->webhook with and without a flood of them, this build beside
//                   BENCH_PUBLIC_OLD_DIST (default /work/base/dist when present) (bench/public-routes.mjs)
//  13. queues      queue destinations (amqp, nats, sqs): messages/s and CPU-ms per message vs each broker's
//                   own client, task.succeeded -> consumer latency (bench/queues.mjs; real brokers on loopback);
//                   BENCH_QUEUES_OLD_DIST=<dist of another build> measures that build side by side
//  14. tracing     (BENCH_ONLY=tracing only) CPU per task with tracing off, this build and an old one,
//                   and on, all spans exported to a loopback collector (bench/tracing.mjs)
//  15. big-outputs (BENCH_ONLY=big-outputs only) a victim's creations and the event-loop max while
//                   7 MB outputs land, this build beside an old one (bench/big-outputs.mjs)
//   6. latency      completion->webhook in REAL time, 500 tasks of 20-60 s at 100 reads/min, against the
//                   simulator's 120/min limit (bench/latency.mjs; about 2 minutes of wall time by itself)
//   8. fairness     delivery under a tenant's slow receivers and to partly working receivers in REAL time
//                   (bench/fairness.mjs; several minutes); BENCH_FAIRNESS_OLD_DIST=<dist of another commit>
//                   runs the same scenarios on that build too (A/B in the same run)
//
// Environment:
//   BENCH_QUICK=1          a tiny run (a handful of requests, one round): checks the scripts still work
//   BENCH_OUT=path.json    where to write the results (default bench/results.json; results.md beside it)
//   BENCH_ROUNDS, BENCH_DURATION (s per intake measurement), BENCH_SCALE_ROWS, BENCH_PROFILE=0|1,
//   BENCH_SCALEOUT_EVENTS, BENCH_SCALEOUT_TASKS (the scale-out row's outbox and end-to-end sizes),
//   BENCH_SCALEOUT_OLD_DIST=<dist> (the scale-out row measures that build too, side by side),
//   BENCH_SCALEOUT_PROTO=1 (its intake cells measure bench/proto/intake-pg.mjs at 1 and 3 processes too),
//   BENCH_RELAY_LOG_LEVEL (default info, the relay's default), BENCH_KEEP=1 (keep the temp folder)
//   BENCH_ONLY=latency[,scheduling,postgres,profiles,fairness,prototypes,scaleout,eta,public,queues]  run only these benchmarks and merge them into the existing results
//                          file (the other rows keep their figures; the entry records its own date and commit)
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join } from "node:path";
import { Webhook } from "standardwebhooks";
import {
  BENCH,
  ROOT,
  cpuMsOf,
  FAST_SIMULATOR_ENV,
  ipcChild,
  memoryOf,
  sleep,
  startNode,
  startRelay,
  startSimulator,
} from "./lib/proc.mjs";
import { distImport, removeSnapshot, snapshotDist } from "./lib/dist.mjs";
import { benchFairness } from "./fairness.mjs";
import { benchLatency } from "./latency.mjs";
import { benchPostgres, startPostgres } from "./postgres.mjs";
import { benchPrototypes } from "./prototypes.mjs";
import { benchScaleout, scaleoutPgFlags } from "./scaleout.mjs";
import { benchMirror } from "./mirror.mjs";
import { findProfile, summariseProfile } from "./lib/profile.mjs";
import { markdown, pct, printTable, tableRows } from "./lib/report.mjs";
import {
  countBenchTasks,
  deleteBenchTasks,
  phaseCounts,
  prepareSeeding,
  seedFinishedTasks,
  seedPendingEvents,
  seedWaitingTasks,
} from "./lib/seed.mjs";
import { distribution, median, round } from "./lib/stats.mjs";
import { creationBody, harness, load, PUBLIC_CALLBACK } from "./lib/harness.mjs";

const QUICK = ["1", "true", "yes"].includes((process.env.BENCH_QUICK ?? "").toLowerCase());
const OUT = process.env.BENCH_OUT || join(BENCH, "results.json");
const MD_OUT = `${OUT.replace(/\.json$/i, "")}.md`;
const envInt = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);
const PARTIAL = [
  "latency",
  "scheduling",
  "postgres",
  "profiles",
  "mirror",
  "fairness",
  "prototypes",
  "scaleout",
  "eta",
  "public",
  "queues",
  "tracing",
  "big-outputs",
];
const ONLY = (process.env.BENCH_ONLY ?? "")
  .split(",")
  .map((s) => s.trim())
  .filter(Boolean);
for (const name of ONLY)
  if (!PARTIAL.includes(name)) throw new Error(`BENCH_ONLY: ${name} is not one of ${PARTIAL.join(", ")}`);

const CFG = QUICK
  ? {
      rounds: envInt("BENCH_ROUNDS", 1),
      intake: { connections: 4, amount: 40, warmup: 0 },
      delivery: { events: 60, windowS: 30 },
      e2e: { amount: 30, connections: 8, drainS: 60 },
      memory: { waiting: 20, inFlight: 20 },
      scale: { rows: envInt("BENCH_SCALE_ROWS", 2_000) },
      prototypes: { e2eTasks: 20, e2eDrainS: 60 },
      profile: process.env.BENCH_PROFILE === "1",
    }
  : {
      rounds: envInt("BENCH_ROUNDS", 3),
      // warmup: seconds of unmeasured load before each measurement (a fresh process starts cold).
      intake: { connections: 32, duration: envInt("BENCH_DURATION", 10), warmup: envInt("BENCH_WARMUP", 2) },
      // Outbox of `events` due events; the relay and the in-process Dispatcher are measured until they
      // have delivered them all or for windowS seconds, whichever comes first.
      delivery: { events: 5_000, windowS: 10 },
      // Creations for durationS seconds, then up to drainS seconds for their webhooks.
      e2e: { duration: 5, connections: 32, drainS: 25 },
      memory: { waiting: 10_000, inFlight: 10_000 },
      scale: { rows: envInt("BENCH_SCALE_ROWS", 1_000_000) },
      // Creations per end-to-end measurement against the prototype path (the same count for both).
      prototypes: { e2eTasks: envInt("BENCH_E2E_TASKS", 1_500), e2eDrainS: 90 },
      profile: process.env.BENCH_PROFILE !== "0",
    };
const RELAY_LOG_LEVEL = process.env.BENCH_RELAY_LOG_LEVEL || "info";
// *Proto: issue #24's targets against the minimal prototypes (throughput >= half the prototype's in
// the same run; CPU-ms per task end to end within 2x of the prototype path).
const GOALS = {
  intake: 0.5,
  intakeBusy: 0.25,
  delivery: 0.6,
  memoryMb: 200,
  scale: 0.8,
  intakeProto: 0.5,
  deliveryProto: 0.5,
  pgIntakeProto: 0.5,
  e2eCpuProto: 2,
};
// `--report [file]`: only print the table of an existing results file and rewrite the .md beside it.
if (process.argv.includes("--report")) {
  const file = process.argv[process.argv.indexOf("--report") + 1] ?? OUT;
  const results = JSON.parse(readFileSync(file, "utf8"));
  const rows = tableRows(results.benchmarks);
  printTable(rows);
  const md = `${file.replace(/\.json$/i, "")}.md`;
  writeFileSync(md, markdown(results, rows));
  process.stdout.write(`\nwrote ${md}\n`);
  process.exit(0);
}

const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-bench-"));
const children = new Set();
const log = (...args) => process.stdout.write(`${args.join(" ")}\n`);
const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0)}s`;

function track(child) {
  children.add(child);
  void child.exitedPromise.then(() => children.delete(child));
  return child;
}

let snapshot = null;

async function cleanup() {
  await Promise.all([...children].map((c) => c.stop(5_000).catch(() => {})));
  // The queue benchmark's brokers run in process groups of their own.
  if (ONLY.length === 0 || ONLY.includes("queues")) await (await import("./queues.mjs")).stopQueueBenchmark();
  removeSnapshot(snapshot);
  if (process.env.BENCH_KEEP !== "1") rmSync(tmp, { recursive: true, force: true });
  else log(`kept ${tmp}`);
}
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    void cleanup().finally(() => process.exit(130));
  });
}

function machine() {
  const cpus = os.cpus();
  return {
    cpus: cpus.length,
    model: cpus[0]?.model ?? "unknown",
    memory_gb: round(os.totalmem() / 1024 ** 3, 1),
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    load_average_at_start: os.loadavg().map((x) => round(x, 2)),
  };
}

function git() {
  const run = (...args) => {
    try {
      return execFileSync("git", args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    } catch {
      return null;
    }
  };
  const status = run("status", "--porcelain", "--untracked-files=no");
  return { commit: run("rev-parse", "HEAD"), dirty: status === null ? null : status.length > 0 };
}

const { warmUp, loadOpts, relayEnv, newDatabase } = harness({ cfg: CFG, quick: QUICK, tmp, logLevel: RELAY_LOG_LEVEL });

// ---------------------------------------------------------------------------------------------
// 1 + 4b. Intake (bare vs relay on an empty database vs relay with N finished tasks), per round.
// ---------------------------------------------------------------------------------------------
async function intakeAndScale(sims, receiver) {
  log(
    `\n[${elapsed()}] intake: bare hono vs relay (empty database) vs relay (${CFG.scale.rows.toLocaleString("en-US")} finished tasks), ${CFG.rounds} round(s)`,
  );
  const empty = await newDatabase("intake-empty");
  const big = await newDatabase("intake-scale");
  const seedSeconds = seedFinishedTasks(big.path, big.client.id, CFG.scale.rows);
  log(`  seeded ${CFG.scale.rows.toLocaleString("en-US")} finished tasks in ${seedSeconds.toFixed(1)} s`);

  const bare = track(
    startNode("bare", join(BENCH, "bare-server.mjs"), { env: { PORT: 0 }, logFile: join(tmp, "bare.log") }),
  );
  const bareUrl = (await bare.waitFor(/listening on (http:\/\/[\d.]+:\d+)/))[1];

  // The upstream holds one running task (UPSTREAM_MAX_CONCURRENT=1, day-long simulator timings),
  // so accepted tasks wait in the relay: the figures are intake alone, not intake plus submission.
  const busyCallback = `${await receiver.call("address")}/hooks/busy`;
  const runRelay = async (db, keyPrefix, busy = false) => {
    deleteBenchTasks(db.path, db.client.id, "bench-");
    deleteBenchTasks(db.path, db.client.id, "warm-");
    // Busy: the workers submit every task to a 50–100 ms upstream, poll it and deliver its webhook
    // to the loopback receiver while the creations come in (the realistic case).
    const env = busy
      ? relayEnv(db.path, sims.busy.url, { UPSTREAM_MAX_CONCURRENT: 10_000, WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" })
      : relayEnv(db.path, sims.hold.url, { UPSTREAM_MAX_CONCURRENT: 1 });
    const relay = track(await startRelay(env, join(tmp, `relay-${keyPrefix}log`)));
    const callback = busy ? busyCallback : PUBLIC_CALLBACK;
    const opts = loadOpts({ url: relay.url, apiKey: db.client.api_key, keyPrefix, body: creationBody(callback) });
    await warmUp(opts);
    const result = await load(opts);
    await relay.stop();
    const rows = countBenchTasks(db.path, db.client.id, keyPrefix);
    result.rows_committed = rows;
    result.durable = rows >= result.accepted;
    return result;
  };

  const rounds = [];
  for (let r = 1; r <= CFG.rounds; r++) {
    const bareOpts = loadOpts({ url: bareUrl, keyPrefix: `bare-r${r}-`, body: creationBody(PUBLIC_CALLBACK) });
    await warmUp(bareOpts);
    const bareResult = await load(bareOpts);
    // Alternating which database goes first cancels slow drifts (other load on the machine).
    let relayResult;
    let scaleResult;
    if (r % 2 === 1) {
      relayResult = await runRelay(empty, `bench-r${r}-empty-`);
      scaleResult = await runRelay(big, `bench-r${r}-scale-`);
    } else {
      scaleResult = await runRelay(big, `bench-r${r}-scale-`);
      relayResult = await runRelay(empty, `bench-r${r}-empty-`);
    }
    const busyResult = await runRelay(empty, `bench-r${r}-busy-`, true);
    rounds.push({ round: r, bare: bareResult, relay: relayResult, relay_scale: scaleResult, relay_busy: busyResult });
    log(
      `  round ${r}: bare ${bareResult.rate}/s (p50 ${bareResult.p50_ms} ms, p99 ${bareResult.p99_ms} ms) | relay ${relayResult.rate}/s (p50 ${relayResult.p50_ms}, p99 ${relayResult.p99_ms}) | relay+${shortCount(CFG.scale.rows)} ${scaleResult.rate}/s (p50 ${scaleResult.p50_ms}, p99 ${scaleResult.p99_ms}) | relay, workers busy ${busyResult.rate}/s (p50 ${busyResult.p50_ms}, p99 ${busyResult.p99_ms})`,
    );
    for (const [name, res] of [
      ["relay", relayResult],
      ["relay+rows", scaleResult],
      ["relay busy", busyResult],
    ]) {
      if (!res.durable) log(`  !! ${name}: ${res.accepted} 201s but only ${res.rows_committed} rows committed`);
      const other = Object.entries(res.status_codes).filter(([k]) => k !== "201");
      if (other.length > 0 || res.errors > 0)
        log(`  !! ${name}: non-201 answers ${JSON.stringify(Object.fromEntries(other))}, errors ${res.errors}`);
    }
  }
  await bare.stop();

  const med = (pick) => median(rounds.map(pick));
  const summary = (key) => ({
    rate: med((r) => r[key].rate),
    p50_ms: med((r) => r[key].p50_ms),
    p99_ms: med((r) => r[key].p99_ms),
    // 201s in the first and in the last full second of a measurement (the relay's backlog grows in between).
    first_second: med((r) => r[key].per_second[0] ?? null),
    last_second: med((r) => r[key].per_second.at(-1) ?? null),
  });
  const bareS = summary("bare");
  const relayS = summary("relay");
  const scaleS = summary("relay_scale");
  const busyS = summary("relay_busy");
  const busyRatio = median(rounds.map((r) => r.relay_busy.rate / r.bare.rate));
  const intakeRatio = median(rounds.map((r) => r.relay.rate / r.bare.rate));
  const scaleRatio = median(rounds.map((r) => r.relay_scale.rate / r.relay.rate));
  const durable = rounds.every((r) => r.relay.durable && r.relay_scale.durable && r.relay_busy.durable);
  return {
    intake: {
      method: `autocannon, ${CFG.intake.connections} connections, ${QUICK ? `${CFG.intake.amount} requests` : `${CFG.intake.duration} s`} per measurement after ${CFG.intake.warmup} s of unmeasured warm-up load on the same process, fresh Idempotency-Key per request, body with a public https callback_url and metadata; only 201s count. Relay: LOG_LEVEL=${RELAY_LOG_LEVEL}, upstream held at one running task (UPSTREAM_MAX_CONCURRENT=1) so accepted tasks wait and the figure is intake alone; the waiting backlog grows during each measurement as in a burst. Baseline: bench/bare-server.mjs (hono on @hono/node-server: parse JSON, answer 201).`,
      bare: bareS,
      relay: relayS,
      ratio: round(intakeRatio, 3),
      goal: GOALS.intake,
      met: intakeRatio >= GOALS.intake,
      durable,
      rounds: rounds.map((r) => ({ round: r.round, bare: r.bare, relay: r.relay })),
      busy: {
        method:
          "the same load while the relay's workers submit every accepted task to a simulator with 50–100 ms tasks (UPSTREAM_MAX_CONCURRENT=10000), poll it within UPSTREAM_READS_PER_MINUTE and deliver each task's webhook to the loopback receiver; same rounds and baseline as the intake figure.",
        relay: busyS,
        ratio: round(busyRatio, 3),
        goal: GOALS.intakeBusy,
        met: busyRatio >= GOALS.intakeBusy,
        rounds: rounds.map((r) => ({ round: r.round, bare: r.bare, relay: r.relay_busy })),
      },
    },
    scale: {
      method: `the same intake measurement against a database already holding ${CFG.scale.rows.toLocaleString("en-US")} finished tasks of the same client (seeded with better-sqlite3), in the same rounds as the empty-database figure; tasks created by earlier rounds are deleted before each measurement.`,
      rows: CFG.scale.rows,
      seed_seconds: round(seedSeconds, 1),
      empty: relayS,
      seeded: scaleS,
      ratio: round(scaleRatio, 3),
      goal: GOALS.scale,
      met: scaleRatio >= GOALS.scale,
      rounds: rounds.map((r) => ({ round: r.round, empty: r.relay, seeded: r.relay_scale })),
    },
    db: big,
  };
}

const shortCount = (n) => (n >= 1_000_000 ? `${n / 1_000_000}M` : n >= 1_000 ? `${n / 1_000}k` : String(n));

// ---------------------------------------------------------------------------------------------
// 4c. Query plans of the hot queries (on the seeded database, with the last round's backlog).
// ---------------------------------------------------------------------------------------------
async function queryPlans(db, sims) {
  log(`\n[${elapsed()}] query plans (EXPLAIN QUERY PLAN of the statements the relay executes)`);
  const helper = track(ipcChild("explain", join(BENCH, "explain.mjs"), join(tmp, "explain.log")));
  try {
    const result = await helper.call("explain", {
      databasePath: db.path,
      apiKey: db.client.api_key,
      upstreamUrl: sims.hold.url,
      repeat: QUICK ? 1 : 5,
    });
    const scans = result.queries.filter((q) => q.full_scan);
    for (const q of result.queries) {
      const flag = q.full_scan ? "FULL SCAN" : q.index_scans.length ? "index scan" : "";
      log(
        `  ${q.phase.padEnd(16)} ${q.name.slice(0, 58).padEnd(58)} ${q.shape.slice(0, 50).padEnd(50)} ${String(q.ms ?? "-").padStart(8)} ms  ${flag}`,
      );
      if (q.full_scan || q.index_scans.length) for (const line of q.plan) log(`      ${line}`);
    }
    log(
      `  ${result.queries.length} statements on ${result.task_rows.toLocaleString("en-US")} task rows; ${scans.length} with a full table scan; an accepted creation runs ${result.per_creation.statements} statements (${result.per_creation.prepares} prepares)`,
    );
    return {
      ...result,
      full_scans: scans.map((q) => ({ phase: q.phase, name: q.name, plan: q.full_scans, rows: q.scan_rows })),
    };
  } finally {
    await helper.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Delivery: raw undici vs the relay process draining a pre-written outbox vs the Dispatcher
// in-process, all to the same receiver.
// ---------------------------------------------------------------------------------------------
/**
 * How many deliveries the built Dispatcher keeps in flight to one receiver: min(maxInFlight, maxPerHost),
 * read from a Dispatcher instance so the raw baseline follows the relay's own settings.
 */
async function dispatcherConcurrency() {
  try {
    const { Dispatcher } = await distImport("workers/dispatcher.js");
    const { loadConfig } = await distImport("config.js");
    // As src/relay.ts builds it: maxPerHost from WEBHOOK_MAX_IN_FLIGHT_PER_HOST when the config has it.
    const config = loadConfig({});
    const probe = new Dispatcher({
      db: null,
      clock: { now: () => Date.now() },
      config,
      logger: null,
      sender: null,
      owner: null,
      ...(config.webhookMaxInFlightPerHost !== undefined ? { maxPerHost: config.webhookMaxInFlightPerHost } : {}),
    });
    const total = Number.isFinite(probe.maxInFlight) ? probe.maxInFlight : 64;
    const perHost = Number.isFinite(probe.maxPerHost) ? probe.maxPerHost : null;
    return { total, perHost, perReceiver: Math.min(total, perHost ?? total) };
  } catch {
    return { total: 64, perHost: null, perReceiver: 64 };
  }
}

async function delivery(receiver, sims) {
  const { events: n, windowS } = CFG.delivery;
  const conc = await dispatcherConcurrency();
  const concurrency = conc.perReceiver;
  // The sender's undici pool has 16 connections per origin (src/webhooks/sender.ts).
  const connections = Math.min(concurrency, 16);
  log(
    `\n[${elapsed()}] delivery: ${n} webhooks per measurement; raw undici at the relay's per-receiver concurrency (${concurrency} in flight: Dispatcher maxInFlight ${conc.total}, maxPerHost ${conc.perHost ?? "none"}) and at 64 in flight; relay; Dispatcher in-process; ${CFG.rounds} round(s)`,
  );
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  const raw = track(ipcChild("raw-sender", join(BENCH, "raw-sender.mjs"), join(tmp, "raw-sender.log")));
  const micro = track(
    ipcChild("dispatcher-micro", join(BENCH, "dispatcher-micro.mjs"), join(tmp, "dispatcher-micro.log")),
  );
  const rounds = [];
  let bodyBytes = null;
  let signatureOk = null;
  try {
    for (let r = 1; r <= CFG.rounds; r++) {
      // The relay process, started on a database whose outbox already holds n due events.
      const db = await newDatabase(`delivery-r${r}`);
      const seeded = seedPendingEvents(db.path, db.client.id, n, hookUrl);
      bodyBytes = seeded.bytes;

      await receiver.call("reset");
      const rawRun = await raw.call("send", { url: hookUrl, body: seeded.sample, total: n, concurrency, connections });
      const rawStats = await receiver.call("stats");
      await receiver.call("reset");
      await raw.call("send", { url: hookUrl, body: seeded.sample, total: n, concurrency: 64, connections: 16 });
      const raw64Stats = await receiver.call("stats");

      await receiver.call("reset");
      const relay = track(
        await startRelay(
          relayEnv(db.path, sims.hold.url, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }),
          join(tmp, `relay-delivery-r${r}.log`),
        ),
      );
      const relayDone = await receiver.call("waitFor", { count: n, timeoutMs: CFG.delivery.windowS * 1000 });
      const relayStats = await receiver.call("stats");
      const sample = await receiver.call("sample");
      await relay.stop();
      try {
        new Webhook(db.client.webhook_secret).verify(sample.body, sample.headers);
        signatureOk = signatureOk !== false;
      } catch {
        signatureOk = false;
      }

      const microDb = await newDatabase(`delivery-micro-r${r}`);
      seedPendingEvents(microDb.path, microDb.client.id, n, hookUrl);
      await receiver.call("reset");
      const microRun = await micro.call("drain", {
        databasePath: microDb.path,
        total: n,
        timeoutMs: CFG.delivery.windowS * 1000,
      });
      const microStats = await receiver.call("stats");

      const entry = {
        round: r,
        raw: {
          rate: round(rawStats.rate, 1),
          received: rawStats.count,
          sender_rate: round(rawRun.rate, 1),
          failed: rawRun.failed,
        },
        raw_64: { rate: round(raw64Stats.rate, 1), received: raw64Stats.count },
        relay: {
          rate: round(relayStats.rate, 1),
          received: relayStats.count,
          unique: relayStats.unique,
          complete: relayDone,
        },
        micro: {
          rate: round(microStats.rate, 1),
          received: microStats.count,
          complete: microRun.complete,
          failed: microRun.failed,
        },
      };
      rounds.push(entry);
      log(
        `  round ${r}: raw ${entry.raw.rate}/s (64 in flight: ${entry.raw_64.rate}/s) | relay ${entry.relay.rate}/s (${entry.relay.received}/${n}) | Dispatcher in-process ${entry.micro.rate}/s (${entry.micro.received}/${n})`,
      );
    }
  } finally {
    await raw.stop();
    await micro.stop();
  }
  const rawRate = median(rounds.map((r) => r.raw.rate));
  const raw64Rate = median(rounds.map((r) => r.raw_64.rate));
  const relayRate = median(rounds.map((r) => r.relay.rate));
  const microRate = median(rounds.map((r) => r.micro.rate));
  const deliveryRatio = median(rounds.map((r) => r.relay.rate / r.raw.rate));
  const microRatio = median(rounds.map((r) => r.micro.rate / r.raw.rate));
  return {
    method: `Rates are arrivals per second at one node:http receiver answering 200 (first to last arrival), over all ${n} events or the first ${windowS} s, whichever ends first. Relay: ${n} task.succeeded events (real webhook bodies, ${bodyBytes} bytes) written to the outbox before the built relay starts (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, LOG_LEVEL=${RELAY_LOG_LEVEL}); its dispatcher signs and delivers them, so polling does not confound the figure. Dispatcher in-process: bench/dispatcher-micro.mjs runs dist's Dispatcher + WebhookSender + WorkerLoop alone (silent logger) on the same outbox. Raw: undici.request through a keep-alive Agent (${connections} connections), ${concurrency} in flight (the relay's own limit towards one receiver: Dispatcher maxInFlight ${conc.total}, maxPerHost ${conc.perHost ?? "none"}), same body, no signing or database; raw_64 is the same at 64 in flight over 16 connections (the machine's loopback limit, for reference). The pipeline's own arrival rate (with polling) is under end_to_end.`,
    body_bytes: bodyBytes,
    signature_verified: signatureOk,
    concurrency: {
      per_receiver: concurrency,
      dispatcher_max_in_flight: conc.total,
      dispatcher_max_per_host: conc.perHost,
      connections,
    },
    raw: { rate: rawRate },
    raw_64: { rate: raw64Rate },
    relay: { rate: relayRate },
    dispatcher_in_process: { rate: microRate, ratio: round(microRatio, 3) },
    ratio: round(deliveryRatio, 3),
    goal: GOALS.delivery,
    met: deliveryRatio >= GOALS.delivery,
    rounds,
  };
}

// ---------------------------------------------------------------------------------------------
// 3. End to end: intake -> simulator (zero times, no read limit) -> webhook.
// ---------------------------------------------------------------------------------------------
async function endToEnd(receiver, sims) {
  const { connections, drainS } = CFG.e2e;
  const size = QUICK ? `${CFG.e2e.amount} creations` : `${CFG.e2e.duration} s of creations`;
  log(
    `\n[${elapsed()}] end to end: ${size} per round through intake -> simulator (0 ms, no read limit) -> webhook, ${CFG.rounds} round(s)`,
  );
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  const rounds = [];
  for (let r = 1; r <= CFG.rounds; r++) {
    const db = await newDatabase(`e2e-r${r}`);
    const relay = track(
      await startRelay(
        relayEnv(db.path, sims.fast.url, {
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
          UPSTREAM_READS_PER_MINUTE: 100_000,
        }),
        join(tmp, `relay-e2e-r${r}.log`),
      ),
    );
    await receiver.call("reset", { parse: true });
    const t0 = Date.now();
    const cpu0 = cpuMsOf(relay.pid);
    const intake = await load({
      url: relay.url,
      apiKey: db.client.api_key,
      keyPrefix: `bench-e2e-r${r}-`,
      body: creationBody(hookUrl),
      connections,
      ...(QUICK ? { amount: CFG.e2e.amount } : { duration: CFG.e2e.duration }),
    });
    const intakeEnd = Date.now();
    // Every committed task is expected to call back, including creations autocannon left in flight
    // when it stopped counting (they still commit): give those a moment, then count the rows.
    await sleep(1_000);
    const committed = countBenchTasks(db.path, db.client.id, `bench-e2e-r${r}-`);
    let complete = await receiver.call("waitFor", { count: committed, timeoutMs: drainS * 1000 });
    const stats = await receiver.call("stats");
    complete = complete && stats.unique >= countBenchTasks(db.path, db.client.id, `bench-e2e-r${r}-`);
    const lat = await receiver.call("latencies");
    const cpuMs = cpuMsOf(relay.pid) - cpu0;
    await relay.stop();
    const lastAt = stats.last ?? Date.now();
    const entry = {
      round: r,
      accepted: intake.accepted,
      committed,
      delivered: stats.count,
      unique_webhook_ids: stats.unique,
      complete,
      intake_rate: intake.rate,
      intake_seconds: round((intakeEnd - t0) / 1000, 2),
      total_seconds: round((lastAt - t0) / 1000, 2),
      tasks_per_s: round(stats.count / Math.max(0.001, (lastAt - t0) / 1000), 1),
      webhook_arrival_rate: round(stats.rate, 1),
      cpu_ms_per_task: stats.count > 0 ? round(cpuMs / stats.count, 3) : null,
      completion_to_webhook_ms: distribution(lat.map(([at, , done]) => at - done).filter(Number.isFinite)),
      creation_to_webhook_ms: distribution(lat.map(([at, created]) => at - created).filter(Number.isFinite)),
    };
    rounds.push(entry);
    log(
      `  round ${r}: ${entry.delivered}/${entry.committed} webhooks, last ${entry.total_seconds} s after the first creation = ${entry.tasks_per_s} tasks/s (intake ${entry.intake_rate}/s for ${entry.intake_seconds} s), ${entry.cpu_ms_per_task} CPU-ms/task${complete ? "" : ` — INCOMPLETE after ${drainS} s`}; completion->webhook p50/p95/p99 ${fmtDist(entry.completion_to_webhook_ms)} ms; creation->webhook ${fmtDist(entry.creation_to_webhook_ms)} ms`,
    );
  }
  const med = (pick) => round(median(rounds.map(pick)), 1);
  const medDist = (key) => ({
    p50: med((r) => r[key].p50),
    p95: med((r) => r[key].p95),
    p99: med((r) => r[key].p99),
  });
  return {
    method: `Per round: ${size} (autocannon, ${connections} connections, callback_url to the loopback receiver) against the built relay, then up to ${drainS} s for their webhooks; simulator with 0 ms queued/processing times and no read limit, UPSTREAM_READS_PER_MINUTE=100000. tasks_per_s = webhooks received / (last webhook - first request). cpu_ms_per_task = the relay process's user + system CPU (/proc/<pid>/stat) from the first request to the wait's end, per webhook received (the relay alone; bench/prototypes.mjs measures a minimal prototype path beside it). completion->webhook = arrival - data.completed_at, the time the relay recorded the terminal status (the simulator's own completion time is not in the webhook; with 0 ms timings it is ~1 ms after submission). creation->webhook = arrival - data.created_at: it includes the poller's first-read delay (2 s for images, src/core/poll-schedule.ts), so the pipeline's latency is bounded by polling, not delivery; the dispatcher's own rate is measured under delivery.`,
    tasks_per_s: med((r) => r.tasks_per_s),
    webhook_arrival_rate: med((r) => r.webhook_arrival_rate),
    cpu_ms_per_task: round(median(rounds.map((r) => r.cpu_ms_per_task)), 3),
    completion_to_webhook_ms: medDist("completion_to_webhook_ms"),
    creation_to_webhook_ms: medDist("creation_to_webhook_ms"),
    complete: rounds.every((r) => r.complete),
    rounds,
  };
}

const fmtDist = (d) => `${d.p50}/${d.p95}/${d.p99}`;

// ---------------------------------------------------------------------------------------------
// 4a. Memory: RSS with tasks waiting in the relay and tasks in flight upstream.
// ---------------------------------------------------------------------------------------------
async function memory(sims) {
  const { waiting, inFlight } = CFG.memory;
  log(
    `\n[${elapsed()}] memory: ${waiting.toLocaleString("en-US")} tasks waiting + ${inFlight.toLocaleString("en-US")} in flight`,
  );
  const db = await newDatabase("memory");
  // The tasks are written as intake leaves them (HTTP intake of 20,000 would take most of the time
  // budget); the relay then submits up to its cap, and day-long simulator timings keep those in flight.
  seedWaitingTasks(db.path, db.client.id, waiting + inFlight);
  const relay = track(
    await startRelay(
      relayEnv(db.path, sims.hold.url, { UPSTREAM_MAX_CONCURRENT: inFlight }),
      join(tmp, "relay-memory.log"),
    ),
  );
  const t0 = Date.now();
  const idle = memoryOf(relay.pid);
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      try {
        samples.push({ at: Date.now(), ...memoryOf(relay.pid) });
      } catch {
        break;
      }
      await sleep(250);
    }
  })();
  const deadline = Date.now() + (QUICK ? 60_000 : 120_000);
  let counts = phaseCounts(db.path);
  while ((counts.submitted ?? 0) < inFlight) {
    if (Date.now() > deadline) break;
    await sleep(500);
    counts = phaseCounts(db.path);
  }
  const reachedAt = Date.now();
  await sleep(QUICK ? 1_000 : 5_000);
  counts = phaseCounts(db.path);
  sampling = false;
  await sampler;
  const steady = samples.filter((s) => s.at >= reachedAt);
  const rssMb = Math.max(...steady.map((s) => s.rssMb));
  const final = memoryOf(relay.pid);
  await relay.stop();
  const reached = (counts.submitted ?? 0) >= inFlight && (counts.waiting ?? 0) >= waiting;
  log(
    `  at start ${idle.rssMb.toFixed(0)} MB; ${counts.submitted ?? 0} submitted in ${((reachedAt - t0) / 1000).toFixed(1)} s; with ${counts.waiting ?? 0} waiting + ${counts.submitted ?? 0} in flight: RSS ${rssMb.toFixed(0)} MB (peak ${final.peakMb.toFixed(0)} MB)`,
  );
  return {
    method: `${waiting + inFlight} tasks written to the database as accepted and waiting, then the built relay started with UPSTREAM_MAX_CONCURRENT=${inFlight} against a simulator whose tasks take a day: it submits ${inFlight} (which stay in flight, polled within the default 100 reads/min budget) and the rest keep waiting. RSS = max of VmRSS (/proc/<pid>/status) sampled every 250 ms over ${QUICK ? 1 : 5} s once the submissions are done; peak = VmHWM over the whole run.`,
    waiting: counts.waiting ?? 0,
    in_flight: counts.submitted ?? 0,
    reached,
    submit_seconds: round((reachedAt - t0) / 1000, 1),
    start_rss_mb: round(idle.rssMb, 1),
    rss_mb: round(rssMb, 1),
    peak_rss_mb: round(final.peakMb, 1),
    goal_mb: GOALS.memoryMb,
    met: reached && rssMb <= GOALS.memoryMb,
    db,
  };
}

/** The hot statements again, timed on the memory benchmark's database (a large backlog of waiting and in-flight tasks). */
async function retimeWithBacklog(plans, scaleClientId, memoryDb) {
  const helper = track(ipcChild("explain-retime", join(BENCH, "explain.mjs"), join(tmp, "explain-retime.log")));
  try {
    const { phases, timings } = await helper.call("retime", {
      databasePath: memoryDb.path,
      queries: plans.queries,
      replace: { [scaleClientId]: memoryDb.client.id },
      repeat: QUICK ? 1 : 5,
    });
    plans.backlog = { phases };
    plans.queries.forEach((q, i) => {
      q.ms_with_backlog = timings[i].ms;
    });
    const slow = [...plans.queries]
      .filter((q) => q.ms_with_backlog !== null)
      .sort((a, b) => b.ms_with_backlog - a.ms_with_backlog)
      .slice(0, 8);
    log(
      `\n[${elapsed()}] the same statements timed with ${phases.waiting ?? 0} waiting + ${phases.submitted ?? 0} submitted tasks (slowest first):`,
    );
    for (const q of slow)
      log(
        `  ${q.phase.padEnd(16)} ${q.name.slice(0, 58).padEnd(58)} ${String(q.ms_with_backlog).padStart(8)} ms (${q.ms} ms on the finished-tasks database)`,
      );
    plans.slowest_with_backlog = slow.map((q) => ({
      phase: q.phase,
      name: q.name,
      ms: q.ms_with_backlog,
      plan: q.plan,
    }));
  } finally {
    await helper.stop();
  }
}

// ---------------------------------------------------------------------------------------------
// Profiles (node --cpu-prof) of the relay during intake and during delivery: not part of the
// figures above, for finding what bounds them.
// ---------------------------------------------------------------------------------------------
async function profiles(receiver, sims) {
  log(`\n[${elapsed()}] profiles (node --cpu-prof of the relay; not counted in the figures)`);
  const keep = join(BENCH, "profiles");
  mkdirSync(keep, { recursive: true });
  const out = {};

  const intakeDir = join(tmp, "prof-intake");
  const db = await newDatabase("profile-intake");
  const relay = track(
    await startRelay(
      relayEnv(db.path, sims.hold.url, { UPSTREAM_MAX_CONCURRENT: 1 }),
      join(tmp, "relay-profile-intake.log"),
      {
        execArgv: ["--cpu-prof", `--cpu-prof-dir=${intakeDir}`],
      },
    ),
  );
  await load(
    loadOpts({
      url: relay.url,
      apiKey: db.client.api_key,
      keyPrefix: "bench-prof-",
      body: creationBody(PUBLIC_CALLBACK),
      ...(QUICK ? {} : { duration: 8 }),
    }),
  );
  await relay.stop();
  const intakeProfile = findProfile(intakeDir);
  if (intakeProfile) {
    copyFileSync(intakeProfile, join(keep, "intake.cpuprofile"));
    out.intake = summariseProfile(intakeProfile);
    out.intake.file = "bench/profiles/intake.cpuprofile";
  }

  const deliveryDir = join(tmp, "prof-delivery");
  const ddb = await newDatabase("profile-delivery");
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  seedPendingEvents(ddb.path, ddb.client.id, CFG.delivery.events, hookUrl);
  await receiver.call("reset");
  const drelay = track(
    await startRelay(
      relayEnv(ddb.path, sims.hold.url, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }),
      join(tmp, "relay-profile-delivery.log"),
      {
        execArgv: ["--cpu-prof", `--cpu-prof-dir=${deliveryDir}`],
      },
    ),
  );
  await receiver.call("waitFor", { count: CFG.delivery.events, timeoutMs: CFG.delivery.windowS * 1000 });
  await drelay.stop();
  const deliveryProfile = findProfile(deliveryDir);
  if (deliveryProfile) {
    copyFileSync(deliveryProfile, join(keep, "delivery.cpuprofile"));
    out.delivery = summariseProfile(deliveryProfile);
    out.delivery.file = "bench/profiles/delivery.cpuprofile";
  }
  for (const [name, p] of Object.entries(out)) {
    log(
      `  ${name}: busy ${p.busy_ms} ms of ${p.sampled_ms} ms sampled; by package: ${p.by_package
        .slice(0, 8)
        .map((c) => `${c.name} ${c.self_pct}%`)
        .join(", ")}`,
    );
    for (const f of p.top_functions.slice(0, 10)) log(`    ${String(f.self_pct).padStart(5)}%  ${f.name}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Poll scheduling in fake time (bench/scheduling.mjs): adaptive vs round-robin under the read budget.
// ---------------------------------------------------------------------------------------------
async function pollScheduling() {
  log(`\n[${elapsed()}] poll scheduling (bench/scheduling.mjs, fake time against the simulator)`);
  try {
    const { benchScheduling } = await import("./scheduling.mjs");
    const result = await benchScheduling({ quick: QUICK });
    for (const r of result.rows) {
      log(
        `  ${String(r.in_flight).padStart(4)} in flight, ${r.strategy.padEnd(11)} ${r.reads_per_finished_task} reads/task, completion->event p50 ${r.p50_completion_to_event_ms} ms, p95 ${r.p95_completion_to_event_ms} ms, max ${r.max_reads_in_any_minute} reads in a minute`,
      );
    }
    return result;
  } catch (err) {
    log(`  skipped: ${err instanceof Error ? err.message : String(err)}`);
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

// ---------------------------------------------------------------------------------------------
// Completion->webhook latency in real time at the read-budget limit (bench/latency.mjs).
// ---------------------------------------------------------------------------------------------
/** Set when a benchmark must fail the run after the results are written (the read budget exceeded). */
const failures = [];

async function latency() {
  log(
    `\n[${elapsed()}] completion->webhook latency in real time (bench/latency.mjs: simulator and relay processes, ${QUICK ? "small variant" : "500 tasks, takes about 2 minutes"})`,
  );
  const result = await benchLatency({ quick: QUICK, tmp, track, log, logLevel: RELAY_LOG_LEVEL });
  result.measured = {
    date: new Date().toISOString(),
    git: git(),
    load_average_at_end: os.loadavg().map((x) => round(x, 2)),
    command: QUICK
      ? "BENCH_QUICK=1 npm run bench"
      : ONLY.length
        ? `BENCH_ONLY=${ONLY.join(",")} npm run bench`
        : "npm run bench",
  };
  if (!result.reads.budget_ok)
    failures.push(
      `latency: ${result.reads.busiest_minute} reads in one 60 s window (budget ${result.reads.budget}), ${result.reads.rate_limited} x 429`,
    );
  return result;
}

// Delivery fairness and partly working receivers in real time (bench/fairness.mjs), optionally A/B.
async function fairness() {
  const oldDist = process.env.BENCH_FAIRNESS_OLD_DIST || null;
  log(
    `\n[${elapsed()}] delivery fairness and partly working receivers in real time (bench/fairness.mjs${oldDist ? `, A/B against ${oldDist}` : ""}${QUICK ? ", small variant" : ", takes several minutes"})`,
  );
  const result = await benchFairness({ quick: QUICK, tmp, track, log, logLevel: RELAY_LOG_LEVEL, oldDist });
  const prefix = oldDist ? `BENCH_FAIRNESS_OLD_DIST=${oldDist} ` : "";
  result.measured = {
    date: new Date().toISOString(),
    git: git(),
    load_average_at_end: os.loadavg().map((x) => round(x, 2)),
    command: `${prefix}${QUICK ? "BENCH_QUICK=1 " : ""}${ONLY.length ? `BENCH_ONLY=${ONLY.join(",")} ` : ""}npm run bench`,
  };
  return result;
}

/** Copies of outputs into a bucket (#25): genrelay's copy against a plain fetch -> PutObject, and its peak RSS on 200 MB. */
// A quick run's 10 MB still takes the multipart path in two parts (8 MiB parts): the smoke run checks the
// row's code, not its figure, and the row is on the critical path of the quick run's second lane.
async function mirrorRow() {
  log(`\n[${elapsed()}] mirror: ${QUICK ? 10 : 200} MB output copied into s3rver (bench/mirror.mjs)`);
  return benchMirror({ log, rounds: QUICK ? 1 : 2, size: QUICK ? 10_000_000 : 200_000_000 });
}

/** The loopback receiver and the upstream whose tasks take a day (intake, memory, delivery and the PostgreSQL rows). */
async function sharedProcesses() {
  const receiver = track(ipcChild("receiver", join(BENCH, "receiver.mjs"), join(tmp, "receiver.log")));
  await receiver.waitFor(/listening/);
  // Tasks take a day and nothing limits concurrency or reads.
  const hold = track(
    await startSimulator(
      {
        SIM_IMAGE_QUEUED_MS: 86_400_000,
        SIM_VIDEO_QUEUED_MS: 86_400_000,
        SIM_MAX_CONCURRENT: 100_000,
        SIM_READS_PER_MINUTE: 0,
      },
      join(tmp, "sim-hold.log"),
    ),
  );
  return { receiver, hold };
}

/** The upstream at 0 ms and no read limit (the end-to-end rows). */
function fastSimulator() {
  return startSimulator(FAST_SIMULATOR_ENV, join(tmp, "sim-fast.log"));
}

/** The relay against minimal prototypes of the same work (bench/prototypes.mjs). */
async function prototypesRows(receiver, sims, pgServer) {
  const result = await benchPrototypes({
    CFG,
    QUICK,
    GOALS,
    tmp,
    log,
    elapsed,
    track,
    sims,
    receiver,
    load,
    loadOpts,
    warmUp,
    creationBody,
    PUBLIC_CALLBACK,
    relayEnv,
    newDatabase,
    logLevel: RELAY_LOG_LEVEL,
    pgServer,
  });
  result.measured = measuredNow();
  return result;
}

/** When, on which commit and with which command a row was measured (rows merged by BENCH_ONLY keep their own). */
function measuredNow() {
  // The command as run, with the sizes that shape the figures.
  const sizes = [
    "BENCH_ROUNDS",
    "BENCH_DURATION",
    "BENCH_E2E_TASKS",
    "BENCH_SCALEOUT_EVENTS",
    "BENCH_SCALEOUT_TASKS",
    "BENCH_QUEUE_EVENTS",
    "BENCH_QUEUE_TASKS",
  ]
    .filter((k) => process.env[k])
    .map((k) => `${k}=${process.env[k]} `)
    .join("");
  return {
    date: new Date().toISOString(),
    git: git(),
    load_average_at_end: os.loadavg().map((x) => round(x, 2)),
    command: `${QUICK ? "BENCH_QUICK=1 " : ""}${sizes}${ONLY.length ? `BENCH_ONLY=${ONLY.join(",")} ` : ""}npm run bench`,
  };
}

/** 1, 2 and 3 instances on one PostgreSQL (its own server, pg_stat_statements preloaded): bench/scaleout.mjs. */
async function scaleoutRow(receiver, sims, pgServer) {
  const result = await benchScaleout({
    pgServer,
    QUICK,
    tmp,
    log,
    elapsed,
    track,
    sims,
    receiver,
    load,
    creationBody,
    PUBLIC_CALLBACK,
    logLevel: RELAY_LOG_LEVEL,
  });
  result.measured = measuredNow();
  if (process.env.BENCH_SCALEOUT_OLD_DIST)
    result.measured.command = `BENCH_SCALEOUT_OLD_DIST=${process.env.BENCH_SCALEOUT_OLD_DIST} ${result.measured.command}`;
  return result;
}

/** estimated_completion_at against the real end, simulated clock (bench/eta.mjs). */
async function etaRow() {
  log(`\n[${elapsed()}] estimated_completion_at error on the simulator (bench/eta.mjs, simulated clock)`);
  const { benchEta } = await import("./eta.mjs");
  const result = await benchEta({ tasks: QUICK ? 200 : 2000 });
  for (const r of result.rows)
    log(
      `  ${r.estimates.padEnd(8)} ${r.n} estimates: median error ${pct(r.median_error_share)}, p90 ${pct(r.p90_error_share)} of the remaining time`,
    );
  result.measured = measuredNow();
  return result;
}

/** Public routes: CPU per anonymous request and a victim's latency under a flood, new beside old (bench/public-routes.mjs). */
async function publicRow() {
  log(`\n[${elapsed()}] public routes: CPU per anonymous request, a victim under a flood (bench/public-routes.mjs)`);
  const { benchPublicRoutes } = await import("./public-routes.mjs");
  const result = await benchPublicRoutes({ log, rounds: QUICK ? 1 : 3 });
  result.measured = measuredNow();
  return result;
}

/** Queue destinations against each broker's own client (bench/queues.mjs). */
/** A row measured by bench/<file>.mjs's `fn`, with its own old build beside (see that file's header). */
async function optInRow(file, fn, what) {
  log(`\n[${elapsed()}] ${what} (bench/${file}.mjs)`);
  const result = await (await import(`./${file}.mjs`))[fn]({ rounds: CFG.rounds, log: (...args) => log(...args) });
  result.measured = measuredNow();
  return result;
}

async function queuesRow() {
  log(`\n[${elapsed()}] queue destinations: relay vs each broker's own client, amqp, nats, sqs (bench/queues.mjs)`);
  const { benchQueues } = await import("./queues.mjs");
  const result = await benchQueues({
    rounds: CFG.rounds,
    ...(QUICK ? { events: 60, latencyTasks: 4, quick: true } : {}),
    log: (...args) => log(...args),
  });
  result.measured = measuredNow();
  if (process.env.BENCH_QUEUES_OLD_DIST)
    result.measured.command = `BENCH_QUEUES_OLD_DIST=${process.env.BENCH_QUEUES_OLD_DIST} ${result.measured.command}`;
  return result;
}

async function postgresRows(receiver, sims, pgServer) {
  const result = await benchPostgres({
    CFG,
    QUICK,
    tmp,
    log,
    elapsed,
    track,
    sims,
    receiver,
    load,
    loadOpts,
    warmUp,
    creationBody,
    PUBLIC_CALLBACK,
    logLevel: RELAY_LOG_LEVEL,
    pgServer,
  });
  result.measured = measuredNow();
  return result;
}

/** BENCH_ONLY: the named benchmarks, merged into the results file already there. */
async function partial(info) {
  log(`genrelay benchmarks, only ${ONLY.join(", ")}${QUICK ? " (QUICK)" : ""}: merged into ${OUT}`);
  const results = JSON.parse(readFileSync(OUT, "utf8"));
  snapshot = snapshotDist();
  log(
    `  ${info.machine.cpus} × ${info.machine.model}, Node ${info.node}, load ${info.machine.load_average_at_start.join(" ")}`,
  );
  if (ONLY.includes("scheduling")) results.benchmarks.poll_scheduling = await pollScheduling();
  if (ONLY.includes("latency")) results.benchmarks.latency = await latency();
  if (ONLY.includes("mirror")) results.benchmarks.mirror = await mirrorRow();
  if (ONLY.includes("fairness")) results.benchmarks.fairness = await fairness();
  if (ONLY.includes("postgres")) {
    await prepareSeeding();
    const { receiver, hold } = await sharedProcesses();
    results.benchmarks.postgres = await postgresRows(receiver, { hold });
  }
  if (ONLY.includes("profiles")) {
    await prepareSeeding();
    const { receiver, hold } = await sharedProcesses();
    results.benchmarks.profiles = await profiles(receiver, { hold });
  }
  if (ONLY.includes("prototypes")) {
    await prepareSeeding();
    const { receiver, hold } = await sharedProcesses();
    results.benchmarks.prototypes = await prototypesRows(receiver, { hold, fast: track(await fastSimulator()) });
  }
  if (ONLY.includes("scaleout")) {
    await prepareSeeding();
    const { receiver, hold } = await sharedProcesses();
    results.benchmarks.scaleout = await scaleoutRow(receiver, { hold, fast: track(await fastSimulator()) });
  }
  if (ONLY.includes("eta")) results.benchmarks.eta = await etaRow();
  if (ONLY.includes("public")) results.benchmarks.public_routes = await publicRow();
  if (ONLY.includes("queues")) results.benchmarks.queues = await queuesRow();
  // Opt-in only (not in the full run): each starts its own relays, several minutes at full scale.
  if (ONLY.includes("tracing"))
    results.benchmarks.tracing = await optInRow("tracing", "benchTracing", "tracing off/on, CPU per task");
  if (ONLY.includes("big-outputs"))
    results.benchmarks.big_outputs = await optInRow(
      "big-outputs",
      "benchBigOutputs",
      "a victim while 7 MB outputs land",
    );
  return results;
}

async function main() {
  log(`genrelay benchmarks${QUICK ? " (QUICK)" : ""}: results -> ${OUT}`);
  const info = { machine: machine(), node: process.version, date: new Date().toISOString(), git: git() };
  if (ONLY.length > 0) return writeResults(await partial(info));
  // Every process of the run uses one copy of the build, whatever happens to dist/ meanwhile.
  snapshot = snapshotDist();
  await prepareSeeding();
  log(
    `  ${info.machine.cpus} × ${info.machine.model}, ${info.machine.memory_gb} GB, Node ${info.node}, load ${info.machine.load_average_at_start.join(" ")}`,
  );

  const { receiver, hold } = await sharedProcesses();
  const sims = {
    hold,
    // Zero processing time and no read limit: the end-to-end upstream.
    fast: track(await fastSimulator()),
    // 50–100 ms tasks: the upstream for intake while the workers submit, poll and deliver.
    busy: track(
      await startSimulator(
        {
          SIM_IMAGE_QUEUED_MS: 0,
          SIM_IMAGE_PROCESSING_MS: 50,
          SIM_IMAGE_PROCESSING_MAX_MS: 100,
          SIM_VIDEO_QUEUED_MS: 0,
          SIM_VIDEO_PROCESSING_MS: 50,
          SIM_VIDEO_PROCESSING_MAX_MS: 100,
          SIM_MAX_CONCURRENT: 100_000,
          SIM_READS_PER_MINUTE: 0,
        },
        join(tmp, "sim-busy.log"),
      ),
    ),
  };

  const benchmarks = {};
  // The rows after the PostgreSQL ones start every process of their own (simulators, relays, brokers,
  // s3rver) and mostly wait on real time. A real run measures each row alone, one after another; a
  // quick run (the smoke test's: no figure is kept) runs those rows beside the others, as a lane of
  // their own, and waits for both lanes before it reports or fails.
  const ownRows = async (b) => {
    b.eta = await etaRow();
    b.public_routes = await publicRow();
    b.queues = await queuesRow();
    if (!QUICK) await memoryRows(b);
    b.poll_scheduling = await pollScheduling();
    b.latency = await latency();
    b.mirror = await mirrorRow();
    b.fairness = await fairness();
  };
  let db;
  const memoryRows = async (b) => {
    const { db: memoryDb, ...memoryResult } = await memory(sims);
    b.memory = memoryResult;
    await retimeWithBacklog(b.query_plans, db.client.id, memoryDb);
  };
  const sharedRows = async (b) => {
    const intakeRows = await intakeAndScale(sims, receiver);
    db = intakeRows.db;
    b.intake = intakeRows.intake;
    b.scale = intakeRows.scale;
    b.query_plans = await queryPlans(db, sims);
    rmSync(db.path, { force: true });
    rmSync(`${db.path}-wal`, { force: true });
    rmSync(`${db.path}-shm`, { force: true });
    b.delivery = await delivery(receiver, sims);
    b.end_to_end = await endToEnd(receiver, sims);
    // One PostgreSQL server (durable settings) for the PostgreSQL rows and the prototypes' PostgreSQL row;
    // a quick run (the smoke test's) keeps it for the scale-out row too, started with that row's flags
    // (its deliveries are held until each window is open, so what these rows wrote cannot delay one).
    const pgServer = await startPostgres(QUICK ? { flags: scaleoutPgFlags() } : {});
    try {
      b.postgres = await postgresRows(receiver, sims, pgServer);
      b.prototypes = await prototypesRows(receiver, sims, pgServer);
      if (QUICK) b.scaleout = await scaleoutRow(receiver, sims, pgServer);
    } finally {
      await pgServer.stop();
    }
    if (!QUICK) b.scaleout = await scaleoutRow(receiver, sims);
    if (QUICK) await memoryRows(b);
    else await ownRows(b);
  };
  const own = {};
  const lanes = await Promise.allSettled([sharedRows(benchmarks), QUICK ? ownRows(own) : null]);
  for (const lane of lanes) if (lane.status === "rejected") throw lane.reason;
  Object.assign(benchmarks, own);
  if (CFG.profile) benchmarks.profiles = await profiles(receiver, sims);

  const results = {
    schema: 1,
    quick: QUICK,
    ...info,
    duration_s: round((Date.now() - started) / 1000, 1),
    load_average_at_end: os.loadavg().map((x) => round(x, 2)),
    config: { ...CFG, relay_log_level: RELAY_LOG_LEVEL },
    goals: GOALS,
    benchmarks,
  };
  writeResults(results);
}

function writeResults(results) {
  const rows = tableRows(results.benchmarks);
  results.table = rows.map(([benchmark, genrelay, baseline, ratioCell, goal, met]) => ({
    benchmark,
    genrelay,
    baseline,
    ratio: ratioCell,
    goal,
    met,
  }));
  printTable(rows, log);
  mkdirSync(dirname(OUT), { recursive: true });
  // Written whole, then renamed: a reader never sees half a file.
  writeFileSync(`${OUT}.tmp`, `${JSON.stringify(results, null, 2)}\n`);
  renameSync(`${OUT}.tmp`, OUT);
  writeFileSync(`${MD_OUT}.tmp`, markdown(results, rows));
  renameSync(`${MD_OUT}.tmp`, MD_OUT);
  log(`\nwrote ${OUT} and ${MD_OUT}${ONLY.length ? "" : ` in ${results.duration_s} s`}`);
  for (const f of failures) log(`!! FAILED: ${f}`);
}

let code = 0;
try {
  await main();
  if (failures.length > 0) code = 1;
} catch (err) {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);

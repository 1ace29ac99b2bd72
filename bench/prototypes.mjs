// The relay against minimal prototypes of the same durable work (bench/proto/), in the same run,
// alternating which goes first, several rounds, medians (issue #24: the prototypes set the practical
// limit on this machine; the targets are fractions of them). CPU is user + system time of the
// measured process from /proc/<pid>/stat over the measured window only (after warm-up / readiness).
//   intake      the relay's POST /openapi/v1/images/generations vs bench/proto/intake-sqlite.mjs
//   delivery    the relay draining a pre-written outbox vs bench/proto/delivery.mjs on the same rows
//   end to end  intake -> 0 ms simulator -> webhook: the relay vs bench/proto/pipeline.mjs (CPU per task)
//   postgres    the relay on PostgreSQL (fsync=on, synchronous_commit=on) vs bench/proto/intake-pg.mjs,
//               one multi-row INSERT per tick (batch) and one INSERT … ON CONFLICT per request (conflict)
// The outside harness's method (issue #43): CPU of every process of a side (the relay or prototype and
// its children, plus the PostgreSQL server's processes where used) over the measured window; order
// rotated every round; medians of the rounds; the load average before and after every round; a round
// is refused when the 1-minute load is above BENCH_MAX_LOAD (bench/lib/load-gate.mjs; never in a
// BENCH_QUICK run), and a row with a refused round is reported as refused, with the loads.
// Alone (no results file written):
//   node bench/prototypes.mjs [intake] [delivery] [end_to_end] [postgres] [--rounds=3] [--dist=DIST] [--profile] [--statements]
// --dist: another build's dist (copied under bench/.ab/ to run on this checkout's node_modules).
// --profile: the end-to-end relay and prototype run under `node --cpu-prof` (bench/profiles/proto-e2e-rN/
// and proto-pipeline-e2e-rN/, read with bench/lib/profile.mjs); their CPU figures are then the
// profiler's, not figures to quote.
// --statements: end to end, each side counts the SQLite statements it runs in the measured window
// (bench/lib/count-statements.cjs, preloaded) and prints them a task, the most run first.
// Sizes (defaults: a fresh process's first seconds, JIT warm-up included): BENCH_WARMUP (2 s) and
// BENCH_DURATION (10 s) for intake; BENCH_DELIVERY_EVENTS (5000), BENCH_DELIVERY_WARM (0 webhooks
// before the CPU window) and BENCH_DELIVERY_WINDOW_S (10) for delivery. A long-running relay's steady
// state: e.g. BENCH_WARMUP=30, or BENCH_DELIVERY_EVENTS=15000 BENCH_DELIVERY_WARM=5000 BENCH_DELIVERY_WINDOW_S=40.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DIST, removeSnapshot, snapshotDist, stageDist, useDist } from "./lib/dist.mjs";
import { harness } from "./lib/harness.mjs";
import { loadAverage, MAX_LOAD, quietEnough, refusedText } from "./lib/load-gate.mjs";
import {
  BENCH,
  FAST_SIMULATOR_ENV,
  HELD_SIMULATOR_ENV,
  ipcChild,
  PROTO_LISTENING,
  sleep,
  startProto,
  startRelay,
  startSimulator,
  treeCpuDelta,
  treeCpuSnapshot,
} from "./lib/proc.mjs";
import { printTable, prototypeRows } from "./lib/report.mjs";
import { countBenchTasks, prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";
import { median, round } from "./lib/stats.mjs";
import { count, startPostgres } from "./postgres.mjs";

/** Rounds that were measured (not refused for the machine's load). */
const measured = (rounds) => rounds.filter((x) => !x.refused);
const perRound = (rounds, pick) => round(median(measured(rounds).map(pick)), 3);
/** Medians of the named figures of one side (`relay`, `prototype`, …) over the rounds. */
const medians = (rounds, side, fields) =>
  Object.fromEntries(fields.map((f) => [f, perRound(rounds, (x) => x[side][f])]));
/**
 * The relay against one prototype side: medians of both, the throughput ratio (median of the
 * per-round ratios; null without a `rate`) and the CPU ratio (relay / prototype, per unit).
 */
function versus(rounds, proto, fields, cpuField) {
  const refused = rounds.filter((x) => x.refused).map((x) => x.refused[0]);
  const loads = rounds.map((x) => x.load_1m);
  // A row with a refused round is no figure: it says so, with the loads (the rounds are kept).
  if (refused.length > 0) return { refused: refusedText(refused), max_load: MAX_LOAD, loads };
  const rate = fields.includes("rate") ? perRound(rounds, (x) => x.relay.rate / x[proto].rate) : null;
  return {
    loads,
    relay: medians(rounds, "relay", fields),
    [proto]: medians(rounds, proto, fields),
    ratio: rate,
    cpu_ratio: perRound(rounds, (x) => x.relay[cpuField] / x[proto][cpuField]),
  };
}
/** Relay first in odd rounds, prototype(s) first in even ones (cancels slow drifts of the machine's load). */
const ordered = (r, kinds) => (r % 2 === 1 ? kinds : [...kinds].reverse());

/**
 * The rounds of a row: each measured only when the machine is quiet enough (a QUICK run measures
 * whatever the load), its sides in rotated order (`side(kind, r)` resolves with one side's figures),
 * with the 1-minute load before and after it; `show(entry)` is the round's log line.
 */
async function rotatedRounds(ctx, kinds, side, show) {
  const rounds = [];
  for (let r = 1; r <= ctx.CFG.rounds; r++) {
    const entry = { round: r };
    const gate = ctx.QUICK ? { ok: true, load: loadAverage() } : await quietEnough({ log: ctx.log });
    if (gate.ok) {
      for (const kind of ordered(r, kinds)) entry[kind] = await side(kind, r);
      entry.load_1m = [gate.load[0], loadAverage()[0]];
      ctx.log(`    round ${r}: ${show(entry)}; 1-minute load ${entry.load_1m[0]} → ${entry.load_1m[1]}`);
    } else {
      entry.refused = [gate.load[0]];
      ctx.log(`    round ${r}: ${refusedText(entry.refused)}`);
    }
    rounds.push(entry);
  }
  return rounds;
}

/** autocannon on a started server after its warm-up; CPU of `pid` over the measured load only. */
async function measureIntake(ctx, child, opts) {
  await ctx.warmUp(opts);
  const cpu0 = treeCpuSnapshot(child.pid);
  const result = await ctx.load(opts);
  const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(child.pid));
  return {
    ...result,
    cpu_ms: round(cpuMs, 0),
    cpu_ms_per_request: result.accepted > 0 ? round(cpuMs / result.accepted, 3) : null,
  };
}

const slim = (x) => ({
  rate: x.rate,
  p50_ms: x.p50_ms,
  p99_ms: x.p99_ms,
  accepted: x.accepted,
  cpu_ms_per_request: x.cpu_ms_per_request,
  durable: x.durable,
});
const line = (name, x) => `${name} ${x.rate}/s (p99 ${x.p99_ms} ms, ${x.cpu_ms_per_request} CPU-ms/req)`;

async function intake(ctx) {
  const { log, sims } = ctx;
  log(`  [${ctx.elapsed()}] intake (SQLite): relay vs bench/proto/intake-sqlite.mjs`);
  const side = async (kind, r) => {
    const db = await ctx.newDatabase(`proto-intake-${kind}-r${r}`);
    const child =
      kind === "relay"
        ? ctx.track(
            await startRelay(
              ctx.relayEnv(db.path, sims.hold.url, { UPSTREAM_MAX_CONCURRENT: 1 }),
              join(ctx.tmp, `relay-proto-intake-r${r}.log`),
            ),
          )
        : await startProto(ctx, `proto-intake-r${r}`, "intake-sqlite.mjs", { DATABASE_PATH: db.path });
    const keyPrefix = `bench-${kind}-r${r}-`;
    const result = await measureIntake(
      ctx,
      child,
      ctx.loadOpts({
        url: child.url,
        apiKey: db.client.api_key,
        keyPrefix,
        body: ctx.creationBody(ctx.PUBLIC_CALLBACK),
      }),
    );
    await child.stop();
    result.durable = countBenchTasks(db.path, db.client.id, keyPrefix) >= result.accepted;
    return slim(result);
  };
  const rounds = await rotatedRounds(
    ctx,
    ["relay", "prototype"],
    side,
    (e) => `${line("relay", e.relay)} | ${line("prototype", e.prototype)}`,
  );
  const cmp = versus(rounds, "prototype", ["rate", "p99_ms", "cpu_ms_per_request"], "cpu_ms_per_request");
  return {
    ...cmp,
    goal: ctx.GOALS.intakeProto,
    met: !cmp.refused && cmp.ratio >= ctx.GOALS.intakeProto,
    durable: measured(rounds).every((x) => x.relay.durable && x.prototype.durable),
    rounds,
  };
}

async function delivery(ctx) {
  const { CFG, log, sims, receiver } = ctx;
  const { events: n, windowS, warm } = CFG.delivery;
  log(`  [${ctx.elapsed()}] delivery: ${n} due events, relay vs bench/proto/delivery.mjs (8 in flight per host)`);
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  const side = async (kind, r) => {
    const db = await ctx.newDatabase(`proto-delivery-${kind}-r${r}`);
    seedPendingEvents(db.path, db.client.id, n, hookUrl);
    await receiver.call("reset");
    const child =
      kind === "relay"
        ? ctx.track(
            await startRelay(
              ctx.relayEnv(db.path, sims.hold.url, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }),
              join(ctx.tmp, `relay-proto-delivery-r${r}.log`),
            ),
          )
        : await startProto(
            ctx,
            `proto-delivery-r${r}`,
            "delivery.mjs",
            { DATABASE_PATH: db.path },
            /proto-delivery ready()/,
          );
    // With BENCH_DELIVERY_WARM, the first webhooks are a warm-up (the JIT compiling the hot path) outside
    // the CPU window; webhooks that arrived before the process was ready are not in it either.
    if (warm > 0) await receiver.call("waitFor", { count: warm, timeoutMs: windowS * 1000 });
    const before = (await receiver.call("stats")).count;
    const cpu0 = treeCpuSnapshot(child.pid);
    const complete = await receiver.call("waitFor", { count: n, timeoutMs: windowS * 1000 });
    const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(child.pid));
    const stats = await receiver.call("stats");
    await child.stop();
    const counted = stats.count - before;
    return {
      rate: round(stats.rate, 1),
      received: stats.count,
      unique: stats.unique,
      complete,
      cpu_ms_per_webhook: counted > 0 ? round(cpuMs / counted, 3) : null,
    };
  };
  const show = (name, x) => `${name} ${x.rate}/s (${x.received}/${n}, ${x.cpu_ms_per_webhook} CPU-ms/webhook)`;
  const rounds = await rotatedRounds(
    ctx,
    ["relay", "prototype"],
    side,
    (e) => `${show("relay", e.relay)} | ${show("prototype", e.prototype)}`,
  );
  const cmp = versus(rounds, "prototype", ["rate", "cpu_ms_per_webhook"], "cpu_ms_per_webhook");
  return {
    events: n,
    ...cmp,
    goal: ctx.GOALS.deliveryProto,
    met: !cmp.refused && cmp.ratio >= ctx.GOALS.deliveryProto,
    complete: measured(rounds).every((x) => x.relay.complete && x.prototype.complete),
    rounds,
  };
}

async function endToEnd(ctx) {
  const { CFG, log, sims, receiver } = ctx;
  const tasks = CFG.prototypes.e2eTasks;
  log(
    `  [${ctx.elapsed()}] end to end: ${tasks} creations each through intake -> simulator (0 ms) -> webhook, relay vs bench/proto/pipeline.mjs`,
  );
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  const side = async (kind, r) => {
    const db = await ctx.newDatabase(`proto-e2e-${kind}-r${r}`);
    // --statements: both sides count their statements (bench/lib/count-statements.cjs) over the window.
    const counted = ctx.countStatements ? join(ctx.tmp, `statements-${kind}-r${r}.json`) : undefined;
    const countArgv = counted ? ["--require", COUNT_STATEMENTS] : [];
    const child =
      kind === "relay"
        ? ctx.track(
            await startRelay(
              ctx.relayEnv(db.path, sims.fast.url, {
                WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
                UPSTREAM_READS_PER_MINUTE: 100_000,
                BENCH_STATEMENTS_FILE: counted,
                BENCH_STATEMENTS_CALLERS: counted && process.env.BENCH_STATEMENTS_CALLERS,
              }),
              join(ctx.tmp, `relay-proto-e2e-r${r}.log`),
              { execArgv: [...countArgv, ...(ctx.relayExecArgv?.(`e2e-r${r}`) ?? [])] },
            ),
          )
        : await startProto(
            ctx,
            `proto-pipeline-r${r}`,
            "pipeline.mjs",
            {
              DATABASE_PATH: db.path,
              UPSTREAM_BASE_URL: sims.fast.url,
              UPSTREAM_API_KEY: "sandbox",
              BENCH_STATEMENTS_FILE: counted,
            },
            PROTO_LISTENING,
            [...countArgv, ...(ctx.protoExecArgv?.(`e2e-r${r}`) ?? [])],
          );
    await receiver.call("reset");
    const keyPrefix = `bench-e2e-${kind}-r${r}-`;
    const t0 = Date.now();
    if (counted) process.kill(child.pid, "SIGUSR2");
    const cpu0 = treeCpuSnapshot(child.pid);
    const made = await ctx.load({
      url: child.url,
      apiKey: db.client.api_key,
      keyPrefix,
      body: ctx.creationBody(hookUrl),
      connections: CFG.e2e.connections,
      amount: tasks,
    });
    await sleep(500);
    const committed = countBenchTasks(db.path, db.client.id, keyPrefix);
    const complete = await receiver.call("waitFor", { count: committed, timeoutMs: CFG.prototypes.e2eDrainS * 1000 });
    const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(child.pid));
    const stats = await receiver.call("stats");
    await child.stop();
    const statements = counted ? statementsPerTask(counted, stats.count) : undefined;
    if (statements) log(`    ${kind}, round ${r}: ${statementsText(statements)}`);
    return {
      ...(statements
        ? { statements_per_task: statements.statements, transactions_per_task: statements.transactions }
        : {}),
      accepted: made.accepted,
      committed,
      delivered: stats.count,
      complete,
      tasks_per_s: round(stats.count / Math.max(0.001, ((stats.last ?? Date.now()) - t0) / 1000), 1),
      cpu_ms_per_task: stats.count > 0 ? round(cpuMs / stats.count, 3) : null,
    };
  };
  const show = (name, x) =>
    `${name} ${x.cpu_ms_per_task} CPU-ms/task (${x.delivered}/${x.committed} webhooks, ${x.tasks_per_s} tasks/s)`;
  const rounds = await rotatedRounds(
    ctx,
    ["relay", "prototype"],
    side,
    (e) => `${show("relay", e.relay)} | ${show("prototype", e.prototype)}`,
  );
  const cmp = versus(rounds, "prototype", ["cpu_ms_per_task", "tasks_per_s"], "cpu_ms_per_task");
  return {
    tasks,
    ...cmp,
    goal: ctx.GOALS.e2eCpuProto,
    met: !cmp.refused && cmp.cpu_ratio !== null && cmp.cpu_ratio <= ctx.GOALS.e2eCpuProto,
    complete: measured(rounds).every((x) => x.relay.complete && x.prototype.complete),
    rounds,
  };
}

const COUNT_STATEMENTS = join(BENCH, "lib", "count-statements.cjs");

/** A side's counted statements a task: all, transactions (BEGIN), and each text's, the most run first. */
function statementsPerTask(file, tasks) {
  const counts = Object.entries(JSON.parse(readFileSync(file, "utf8")));
  const per = (n) => round(n / Math.max(1, tasks), 2);
  const isBegin = (text) => /^BEGIN/i.test(text);
  return {
    statements: per(counts.reduce((a, [text, n]) => a + (isBegin(text) ? 0 : n), 0)),
    transactions: per(counts.reduce((a, [text, n]) => a + (isBegin(text) ? n : 0), 0)),
    each: counts.sort((a, b) => b[1] - a[1]).map(([text, n]) => [per(n), text]),
  };
}

const statementsText = (s) =>
  `${s.statements} statements and ${s.transactions} transactions a task:\n${s.each
    .filter(([n]) => n >= 0.01)
    .map(([n, text]) => `      ${String(n).padStart(6)}  ${text}`)
    .join("\n")}`;

async function postgres(ctx) {
  const { log, sims } = ctx;
  const server = ctx.pgServer ?? (await startPostgres());
  const settings = await server.settings();
  log(
    `  [${ctx.elapsed()}] PostgreSQL intake (fsync=${settings.fsync}, synchronous_commit=${settings.synchronous_commit}): relay vs bench/proto/intake-pg.mjs (batch: one multi-row INSERT per tick; conflict: one INSERT … ON CONFLICT per request)`,
  );
  const kinds = ["relay", "batch", "conflict"];
  const side = async (kind, r) => {
    const { url, client } = await server.migrated(`proto_${kind}_r${r}`);
    const child =
      kind === "relay"
        ? ctx.track(
            await startRelay(
              {
                DATABASE_URL: url,
                UPSTREAM_BASE_URL: sims.hold.url,
                UPSTREAM_API_KEY: "sandbox",
                LOG_LEVEL: ctx.logLevel,
                UPSTREAM_MAX_CONCURRENT: 1,
              },
              join(ctx.tmp, `relay-proto-pg-r${r}.log`),
            ),
          )
        : await startProto(ctx, `proto-intake-pg-${kind}-r${r}`, "intake-pg.mjs", { DATABASE_URL: url, MODE: kind });
    const keyPrefix = `bench-pg-${kind}-r${r}-`;
    const opts = ctx.loadOpts({
      url: child.url,
      apiKey: client.api_key,
      keyPrefix,
      body: ctx.creationBody(ctx.PUBLIC_CALLBACK),
    });
    await ctx.warmUp(opts);
    const db0 = treeCpuSnapshot(server.pid());
    const cpu0 = treeCpuSnapshot(child.pid);
    const result = await ctx.load(opts);
    const cpuMs = treeCpuDelta(cpu0, treeCpuSnapshot(child.pid));
    const dbMs = treeCpuDelta(db0, treeCpuSnapshot(server.pid()));
    await child.stop();
    result.durable =
      (await count(url, "SELECT count(*) AS n FROM tasks WHERE idempotency_key LIKE $1", [`${keyPrefix}%`])) >=
      result.accepted;
    result.cpu_ms_per_request = result.accepted > 0 ? round(cpuMs / result.accepted, 3) : null;
    return {
      ...slim(result),
      db_cpu_ms_per_request: result.accepted > 0 ? round(dbMs / result.accepted, 3) : null,
      // The outside figure: the relay's (or prototype's) CPU and the server's, per request.
      total_cpu_ms_per_request: result.accepted > 0 ? round((cpuMs + dbMs) / result.accepted, 3) : null,
    };
  };
  let rounds;
  try {
    rounds = await rotatedRounds(ctx, kinds, side, (e) =>
      kinds.map((k) => `${line(k, e[k])} + ${e[k].db_cpu_ms_per_request} in PostgreSQL`).join(" | "),
    );
  } finally {
    if (!ctx.pgServer) await server.stop();
  }
  const fields = ["rate", "p99_ms", "cpu_ms_per_request", "db_cpu_ms_per_request", "total_cpu_ms_per_request"];
  // The CPU ratio counts both processes of each side: relay + server against prototype + server.
  const cmp = versus(rounds, "batch", fields, "total_cpu_ms_per_request");
  return {
    settings,
    ...cmp,
    ...(cmp.refused
      ? {}
      : {
          conflict: medians(rounds, "conflict", fields),
          ratio_conflict: perRound(rounds, (x) => x.relay.rate / x.conflict.rate),
        }),
    goal: ctx.GOALS.pgIntakeProto,
    met: !cmp.refused && cmp.ratio >= ctx.GOALS.pgIntakeProto,
    durable: measured(rounds).every((x) => kinds.every((k) => x[k].durable)),
    rounds,
  };
}

/**
 * @param ctx { CFG, QUICK, GOALS, tmp, log, elapsed, track, sims: { hold, fast }, receiver, load, loadOpts, warmUp,
 *              creationBody, PUBLIC_CALLBACK, relayEnv, newDatabase, logLevel, pgServer? (a running startPostgres(), left running) }
 */
export async function benchPrototypes(ctx) {
  const { CFG, log, elapsed } = ctx;
  log(
    `\n[${elapsed()}] the relay against minimal prototypes of the same durable work (bench/proto/), ${CFG.rounds} round(s)`,
  );
  const out = {
    method: `Each figure is measured in the same round as its prototype, alternating which goes first; medians of ${CFG.rounds} round(s), a ratio is the median of the per-round ratios. CPU-ms = user + system time of every process of the measured side (the relay or prototype, all threads and any child) from /proc over the measured window only, divided by the units done in it; on PostgreSQL the server's processes (the postmaster and all its children) are counted too, given apart and in the ratio (relay + server against prototype + server). The load generator, receiver and simulator are other processes. The 1-minute load average is recorded before and after every round; a round is refused when it is above BENCH_MAX_LOAD (default 1.5 on 2 cores, after waiting up to BENCH_LOAD_WAIT_S for it to fall), and a row with a refused round is reported as refused. Intake: as the intake row (autocannon, ${CFG.intake.connections} connections, ${CFG.intake.duration ? `${CFG.intake.duration} s` : `${CFG.intake.amount} requests`} after ${CFG.intake.warmup} s of warm-up, fresh Idempotency-Key, only 201s count, every 201 checked to be a committed row); relay with the upstream held at one running task. Prototype bench/proto/intake-sqlite.mjs: node:http, JSON.parse, the same fields validated with zod, Bearer key SHA-256 looked up in an in-memory cache, one prepared INSERT … ON CONFLICT DO NOTHING into the relay's tasks table (migrated by the relay's CLI: every index), the inserts of one event-loop turn in one transaction, WAL + synchronous=FULL, 201 with the task's JSON. Delivery: ${CFG.delivery.events} due task.succeeded events seeded into the outbox (bench/lib/seed.mjs) before the process starts${CFG.delivery.warm > 0 ? `, the first ${CFG.delivery.warm} delivered before the CPU window opens (warm-up)` : ""}, arrivals per second at the loopback receiver; prototype bench/proto/delivery.mjs: claims due events 64 at a time under a lease (one UPDATE … RETURNING, per-task order kept), Standard Webhooks HMAC with node:crypto, undici Pool with 8 connections per origin (8 in flight), the event's new state and its delivery_attempts row recorded in batched transactions (up to 64 attempts or 20 ms), WAL + synchronous=FULL. End to end: ${CFG.prototypes.e2eTasks} creations (autocannon, ${CFG.e2e.connections} connections) with a loopback callback_url against the simulator at 0 ms; CPU from readiness to the last webhook, per webhook received; prototype bench/proto/pipeline.mjs: the intake above plus claim -> act -> record loops for submission and single-task reads (no read budget, credits or upstream limits) and the delivery above. PostgreSQL: embedded PostgreSQL with fsync=on and synchronous_commit=on (durable), the relay's migrations/pg applied by its CLI; prototype bench/proto/intake-pg.mjs (node:http, the same validation, pg Pool): batch = one multi-row INSERT … ON CONFLICT DO NOTHING per event-loop turn (up to 4 statements in flight), conflict = one prepared INSERT … ON CONFLICT DO NOTHING per request (pool of 16); the ratio is the relay against batch.`,
  };
  const rows = ctx.rows ?? ROWS;
  if (rows.includes("intake")) out.intake = await intake(ctx);
  if (rows.includes("delivery")) out.delivery = await delivery(ctx);
  if (rows.includes("end_to_end")) out.end_to_end = await endToEnd(ctx);
  if (rows.includes("postgres")) out.postgres = await postgres(ctx);
  return out;
}

const ROWS = ["intake", "delivery", "end_to_end", "postgres"];

/** `node bench/prototypes.mjs [rows] [--rounds=N] [--dist=DIST]`: the rows named (all by default), printed, no file written. */
async function main(argv) {
  const rows = argv.filter((a) => !a.startsWith("--"));
  for (const row of rows) if (!ROWS.includes(row)) throw new Error(`${row} is not one of ${ROWS.join(", ")}`);
  const flag = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const rounds = Number(flag("rounds") ?? 3);
  const other = flag("dist");
  const profiles = argv.includes("--profile") ? join(BENCH, "profiles") : null;
  const countStatements = argv.includes("--statements");
  const dist = other ? stageDist(resolve(other), "proto") : null;
  if (dist) useDist(dist);
  const snapshot = dist ? null : snapshotDist();
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-proto-"));
  const children = new Set();
  const track = (child) => {
    children.add(child);
    void child.exitedPromise.then(() => children.delete(child));
    return child;
  };
  const log = (line) => process.stdout.write(`${line}\n`);
  const started = Date.now();
  // npm run bench's full-size settings (bench/run.mjs), and issue #24's goals against the prototypes.
  const CFG = {
    rounds,
    // BENCH_WARMUP / BENCH_DURATION as in bench/run.mjs: a longer warm-up measures the JIT-compiled steady state.
    intake: {
      connections: 32,
      duration: Number(process.env.BENCH_DURATION ?? 10),
      warmup: Number(process.env.BENCH_WARMUP ?? 2),
    },
    // BENCH_DELIVERY_EVENTS seeded, the first BENCH_DELIVERY_WARM of them outside the CPU window, each
    // side given BENCH_DELIVERY_WINDOW_S to deliver them all.
    delivery: {
      events: Number(process.env.BENCH_DELIVERY_EVENTS ?? 5_000),
      warm: Number(process.env.BENCH_DELIVERY_WARM ?? 0),
      windowS: Number(process.env.BENCH_DELIVERY_WINDOW_S ?? 10),
    },
    e2e: { connections: 32 },
    prototypes: { e2eTasks: 1_500, e2eDrainS: 90 },
  };
  try {
    await prepareSeeding();
    log(`build ${DIST}, ${rounds} round(s), BENCH_MAX_LOAD=${MAX_LOAD}, load ${loadAverage().join(" ")}`);
    const receiver = track(ipcChild("receiver", join(BENCH, "receiver.mjs"), join(tmp, "receiver.log")));
    await receiver.waitFor(/listening/);
    const needs = rows.length ? rows : ROWS;
    const sims = {
      hold: track(await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim-hold.log"))),
      ...(needs.includes("end_to_end")
        ? { fast: track(await startSimulator(FAST_SIMULATOR_ENV, join(tmp, "sim-fast.log"))) }
        : {}),
    };
    const result = await benchPrototypes({
      CFG,
      QUICK: false,
      GOALS: { intakeProto: 0.5, deliveryProto: 0.5, pgIntakeProto: 0.5, e2eCpuProto: 2 },
      tmp,
      log,
      elapsed: () => `${((Date.now() - started) / 1000).toFixed(0)}s`,
      track,
      sims,
      receiver,
      logLevel: "info",
      rows: needs,
      relayExecArgv: profiles
        ? (name) => ["--cpu-prof", `--cpu-prof-dir=${join(profiles, `proto-${name}`)}`]
        : undefined,
      protoExecArgv: profiles
        ? (name) => ["--cpu-prof", `--cpu-prof-dir=${join(profiles, `proto-pipeline-${name}`)}`]
        : undefined,
      countStatements,
      ...harness({ cfg: CFG, quick: false, tmp, logLevel: "info" }),
    });
    const { method: _method, ...figures } = result;
    log(JSON.stringify(figures, (k, v) => (k === "rounds" ? undefined : v)));
    printTable(prototypeRows(result), log);
    log(`load at the end ${loadAverage().join(" ")}`);
  } finally {
    await Promise.all([...children].map((c) => c.stop(5_000).catch(() => {})));
    removeSnapshot(snapshot);
    if (dist) removeSnapshot(dirname(dist));
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));

// Scale-out row of `npm run bench` (BENCH_ONLY=scaleout): 1, 2 and 3 relay instances on ONE durable
// PostgreSQL (fsync=on, synchronous_commit=on), for delivery, intake and end to end. Per unit of work:
// the relays' CPU (/proc/<pid>/stat of each relay) plus the PostgreSQL server's CPU (the postmaster and
// all its children, the bench's own admin backends left out), the statements run and their execution
// time (pg_stat_statements, preloaded), the WAL written (pg_current_wal_lsn() before and after), and
// lock waits (pg_locks sampled every 50 ms for locks not granted: how many sessions wait, on what).
// The ratio of 3 instances to 1 is the figure issue #32 sets a goal for (≤ 1.15).
//
//   - delivery   an outbox of `events` task.succeeded events written before the relays start, held back
//                (next attempt in an hour) until every instance is up; then released in one UPDATE and
//                measured until the loopback receiver has them all (signed webhooks/s)
//   - intake     autocannon on each instance (the connections split between them), the upstream held at
//                one running task so the accepted tasks wait (creations/s)
//   - end to end `tasks` creations spread over the instances, through the simulator at 0 ms to the
//                webhook; CPU from the first creation to the last webhook (tasks/s)
//
// BENCH_SCALEOUT_OLD_DIST=<dist of another build> runs every measurement on that build too, side by side
// (alternating which goes first), so one run gives before and after. BENCH_SCALEOUT_PROTO=1 measures
// intake on bench/proto/intake-pg.mjs (MODE=batch) too, 1 and 3 processes in the same rounds: what
// splitting the same connections between instances costs a minimal durable intake (the floor of the
// ratio on this machine). Sizes: BENCH_SCALEOUT_EVENTS,
// BENCH_SCALEOUT_TASKS, BENCH_DURATION (s of intake), BENCH_ROUNDS, BENCH_SCALEOUT_INSTANCES (e.g. 1,3),
// BENCH_SCALEOUT_KINDS (e.g. intake,end_to_end); BENCH_SCALEOUT_TOP (statements listed per cell, by
// execution time: 10; 100 lists every statement a task runs, for counting them).
import pg from "pg";
import { join, resolve } from "node:path";
import { DIST } from "./lib/dist.mjs";
import { cpuMsOf, sleep, startProto, startRelay, treeCpuSnapshot } from "./lib/proc.mjs";
import { count, releaseHeld, seedOutbox, startPostgres } from "./postgres.mjs";
import { median, round } from "./lib/stats.mjs";

export const SCALEOUT_GOAL = 1.15;

/** The prototype side's name in `builds` (BENCH_SCALEOUT_PROTO=1): intake only. */
const PROTO = "proto";

export function scaleoutConfig(QUICK) {
  const env = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);
  return QUICK
    ? {
        // The smoke run (test/integration/bench-smoke.test.ts) checks the row's code path, not its
        // figure: 1 and 2 instances (9 relay starts instead of 12) report ratio_2_to_1. The events
        // stay due 8 s after the writing: at load 7 a 5 s wait let the relays deliver before the
        // measured window opened (0 CPU-ms per unit, a ratio of null).
        instances: [1, 2],
        rounds: env("BENCH_ROUNDS", 1),
        // heldS: the events are written due an hour ahead and released (UPDATE + the relays' NOTIFY)
        // once the window is open, so no start-up, however slow, falls into it or delays it.
        // shareRelays: one set of instances per upstream that grows with the count (2 = 1's and one
        // more, on its database), delivery and intake on the same set: 4 relay starts, not 9.
        delivery: { events: 60, windowS: 60, heldS: 3600 },
        shareRelays: true,
        intake: { connections: 6, amount: 30, warmup: 0 },
        e2e: { tasks: 18, connections: 6, drainS: 60 },
      }
    : {
        // BENCH_SCALEOUT_INSTANCES=1,3: only the counts the ratio needs (a shorter A/B run).
        instances: process.env.BENCH_SCALEOUT_INSTANCES
          ? process.env.BENCH_SCALEOUT_INSTANCES.split(",").map(Number)
          : [1, 2, 3],
        rounds: env("BENCH_ROUNDS", 1),
        delivery: { events: env("BENCH_SCALEOUT_EVENTS", 4_000), windowS: 120, startS: 12 },
        // BENCH_SCALEOUT_CONNECTIONS: the intake's connections, split between the instances (30).
        intake: {
          connections: env("BENCH_SCALEOUT_CONNECTIONS", 30),
          duration: env("BENCH_DURATION", 6),
          warmup: env("BENCH_WARMUP", 2),
        },
        e2e: { tasks: env("BENCH_SCALEOUT_TASKS", 600), connections: 24, drainS: 180 },
      };
}

/** The scale-out row's server flags: statement counts, and no checkpoint inside a measured window. */
export function scaleoutPgFlags() {
  return [
    "shared_preload_libraries=pg_stat_statements",
    "checkpoint_timeout=1h",
    "max_wal_size=4GB",
    // BENCH_SCALEOUT_PG_FLAGS="pg_stat_statements.track_planning=on …": more server flags (planning time per unit).
    ...(process.env.BENCH_SCALEOUT_PG_FLAGS?.split(" ").filter(Boolean) ?? []),
  ];
}

/**
 * pg_locks not granted, every `everyMs`: mean sessions waiting, share of samples with a wait, by lock
 * type; and what the database's active backends wait on (pg_stat_activity.wait_event: IO:WALSync,
 * LWLock:WALWrite, Lock:transactionid…; "CPU" when none), mean backends per sample.
 */
function lockSampler(client, dbName, everyMs = 50) {
  let samples = 0;
  let withWaits = 0;
  let waiting = 0;
  let peak = 0;
  const byType = {};
  const byWait = {};
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await client.query(
        "SELECT locktype, mode, count(*)::int AS n FROM pg_locks WHERE NOT granted GROUP BY locktype, mode",
      );
      const active = await client.query(
        `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*)::int AS n FROM pg_stat_activity
          WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1`,
        [dbName],
      );
      for (const r of active.rows) byWait[r.w] = (byWait[r.w] ?? 0) + r.n;
      samples++;
      let n = 0;
      for (const r of rows) {
        n += r.n;
        const key = `${r.locktype} ${r.mode}`;
        byType[key] = (byType[key] ?? 0) + r.n;
      }
      if (n > 0) withWaits++;
      waiting += n;
      peak = Math.max(peak, n);
      await sleep(everyMs);
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    return {
      samples,
      share_of_samples_with_a_wait: samples ? round(withWaits / samples, 3) : 0,
      mean_sessions_waiting: samples ? round(waiting / samples, 2) : 0,
      peak_sessions_waiting: peak,
      by_type: Object.fromEntries(
        Object.entries(byType)
          .sort((a, b) => b[1] - a[1])
          .map(([k, v]) => [k, round(v / samples, 3)]),
      ),
      backends_by_wait_event: Object.fromEntries(
        Object.entries(byWait)
          .sort((a, b) => b[1] - a[1])
          .map(([k, v]) => [k, round(v / samples, 3)]),
      ),
    };
  };
}

/**
 * Every window starts just after a checkpoint (and none comes during it: see the server's flags), so
 * each pays the same full-page images on its first change of a page, whichever build or instance count.
 */
const checkpoint = (admin) => admin.query("CHECKPOINT");

/** A measurement window: relay + server CPU, statements, WAL and lock waits between start() and its end(). */
async function window(server, admin, dbName, relays, excludePids) {
  const oid = (await admin.query("SELECT oid FROM pg_database WHERE datname = $1", [dbName])).rows[0].oid;
  const statements = server.statements;
  if (statements) await admin.query("SELECT pg_stat_statements_reset()");
  const lsn0 = (await admin.query("SELECT pg_current_wal_lsn() AS l")).rows[0].l;
  // Write transactions: the transaction ids handed out (read-only ones take none), each commit of
  // one a WAL flush with synchronous_commit=on unless group-committed with another. The reading
  // transaction takes one itself. Only this database is busy meanwhile.
  const xid = async () => Number((await admin.query("SELECT txid_current() AS x")).rows[0].x);
  const commits0 = await xid();
  const db0 = treeCpuSnapshot(server.pid());
  const relay0 = relays.map((r) => cpuMsOf(r.pid));
  const stopLocks = lockSampler(admin, dbName);
  const t0 = performance.now();
  return async (units) => {
    const seconds = (performance.now() - t0) / 1000;
    const relayMs = relays.reduce((s, r, i) => s + cpuMsOf(r.pid) - relay0[i], 0);
    const db1 = treeCpuSnapshot(server.pid());
    const locks = await stopLocks();
    let dbMs = 0;
    for (const [pid, cpu] of db1) if (!excludePids.includes(pid)) dbMs += cpu - (db0.get(pid) ?? 0);
    const wal = Number((await admin.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS b", [lsn0])).rows[0].b);
    const commitCount = (await xid()) - commits0 - 1;
    const per = (x) => (units > 0 ? round(x / units, 3) : null);
    const out = {
      units,
      seconds: round(seconds, 2),
      rate: round(units / Math.max(0.001, seconds), 1),
      relay_cpu_ms_per_unit: per(relayMs),
      pg_cpu_ms_per_unit: per(dbMs),
      cpu_ms_per_unit: per(relayMs + dbMs),
      wal_bytes_per_unit: units > 0 ? Math.round(wal / units) : null,
      commits_per_unit: per(commitCount),
      locks,
    };
    if (statements) {
      const { rows } = await admin.query(
        `SELECT query, calls::float8 AS calls, total_exec_time AS ms, total_plan_time AS plan_ms FROM pg_stat_statements
          WHERE dbid = $1 ORDER BY total_exec_time DESC`,
        [oid],
      );
      const calls = rows.reduce((s, r) => s + r.calls, 0);
      const ms = rows.reduce((s, r) => s + r.ms, 0);
      out.statements_per_unit = per(calls);
      out.statement_ms_per_unit = per(ms);
      // Statements with a pg_notify: a creation batch's sends it whenever it writes a row (each wakes every
      // instance's LISTEN session and its backend); a task change's only when a watcher may want it (NOTIFY_IF_WATCHED).
      out.notifies_per_unit = per(rows.filter((r) => r.query.includes("pg_notify")).reduce((s, r) => s + r.calls, 0));
      // Zero unless the server tracks planning (pg_stat_statements.track_planning=on).
      out.plan_ms_per_unit = per(rows.reduce((s, r) => s + r.plan_ms, 0));
      out.top_statements = rows.slice(0, Number(process.env.BENCH_SCALEOUT_TOP ?? 10)).map((r) => ({
        query: r.query.replace(/\s+/g, " ").slice(0, 160),
        calls_per_unit: per(r.calls),
        ms_per_unit: per(r.ms),
        plan_ms_per_unit: per(r.plan_ms),
      }));
    }
    return out;
  };
}

/**
 * @param ctx { QUICK, tmp, log, elapsed, track, sims: { hold, fast }, receiver, load, creationBody, PUBLIC_CALLBACK, logLevel }
 */
export async function benchScaleout(ctx) {
  const { QUICK, tmp, log, elapsed, track, sims, receiver, load, creationBody, PUBLIC_CALLBACK, logLevel, pgServer } =
    ctx;
  const cfg = scaleoutConfig(QUICK);
  const oldDist = process.env.BENCH_SCALEOUT_OLD_DIST ? resolve(process.env.BENCH_SCALEOUT_OLD_DIST) : null;
  const builds = oldDist
    ? [
        ["new", DIST],
        ["old", oldDist],
      ]
    : [["new", DIST]];
  if (process.env.BENCH_SCALEOUT_PROTO === "1") builds.push([PROTO, PROTO]);
  log(
    `\n[${elapsed()}] scale-out: ${cfg.instances.join(", ")} instance(s) on one durable PostgreSQL (delivery, intake, end to end)${oldDist ? `, A/B against ${oldDist}` : ""}; ${cfg.rounds} round(s)`,
  );
  // ctx.pgServer (a quick run's): a server started with scaleoutPgFlags() by the caller, who stops it.
  const server = pgServer ?? (await startPostgres({ flags: scaleoutPgFlags() }));
  const admin = new pg.Client({ connectionString: server.admin });
  await admin.connect();
  try {
    await admin.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    server.statements = true;
  } catch (err) {
    log(`  pg_stat_statements unavailable (${err.message}): no statement counts`);
    server.statements = false;
  }
  const adminPid = (await admin.query("SELECT pg_backend_pid() AS p")).rows[0].p;
  const settings = await server.settings();
  const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
  const env = (url, upstream, extra = {}) => ({
    DATABASE_URL: url,
    UPSTREAM_BASE_URL: upstream,
    UPSTREAM_API_KEY: "sandbox",
    LOG_LEVEL: logLevel,
    ...extra,
  });
  const startN = (n, url, upstream, extra, dist, tag) =>
    Promise.all(
      Array.from({ length: n }, (_, i) =>
        startRelay(env(url, upstream, extra), join(tmp, `relay-scale-${tag}-${i}.log`), { dist, execArgv }).then(track),
      ),
    );
  const dbOf = (url) => new URL(url).pathname.slice(1);
  // BENCH_SCALEOUT_EXEC_ARGV="--cpu-prof --cpu-prof-dir=DIR": node flags of every relay (a profile each).
  const execArgv = process.env.BENCH_SCALEOUT_EXEC_ARGV?.split(" ").filter(Boolean) ?? [];

  // A measurement's instances, on a database of their own: a fresh set per measurement, or (quick) one
  // set per build and upstream that grows with the count (n = 2 is n = 1's instance and one more, on
  // its database), delivery and intake on the held upstream with both measurements' settings.
  const envOf = {
    d: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" },
    i: { UPSTREAM_MAX_CONCURRENT: 1 },
    e: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", UPSTREAM_READS_PER_MINUTE: 100_000 },
  };
  const shared = new Map();
  const instances = async (n, dist, tag, kind) => {
    if (dist === PROTO) {
      const { url, client } = await server.migrated(`scale_${kind}_${tag}`);
      const protos = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          startProto({ track, tmp }, `proto-scale-${tag}-${i}`, "intake-pg.mjs", { DATABASE_URL: url, MODE: "batch" }),
        ),
      );
      return { url, client, relays: protos, release: () => Promise.all(protos.map((r) => r.stop())) };
    }
    const upstream = kind === "e" ? sims.fast.url : sims.hold.url;
    if (!cfg.shareRelays) {
      const { url, client } = await server.migrated(`scale_${kind}_${tag}`, { dist });
      const relays = await startN(n, url, upstream, envOf[kind], dist, `${kind}-${tag}`);
      return { url, client, relays, release: () => Promise.all(relays.map((r) => r.stop())) };
    }
    const group = kind === "e" ? "e" : "h";
    const key = `${group} ${dist}`;
    if (!shared.has(key))
      shared.set(
        key,
        server
          .migrated(`scale_${group}_${tag}`, { dist })
          .then((db) => ({ ...db, relays: [], grow: Promise.resolve() })),
      );
    const set = await shared.get(key);
    const env = group === "e" ? envOf.e : { ...envOf.d, ...envOf.i };
    set.grow = set.grow.then(async () => {
      if (set.relays.length < n)
        set.relays.push(...(await startN(n - set.relays.length, set.url, upstream, env, dist, `${group}-${tag}`)));
    });
    await set.grow;
    return { url: set.url, client: set.client, relays: set.relays.slice(0, n), release: async () => {} };
  };
  const stopShared = async () => {
    const sets = await Promise.allSettled(shared.values());
    shared.clear();
    await Promise.all(sets.flatMap((x) => (x.status === "fulfilled" ? x.value.relays.map((r) => r.stop()) : [])));
  };
  /** Tasks of one measurement committed (its creations' keys start with bench-<tag>-). */
  const committedOf = (url, tag) =>
    count(url, "SELECT count(*) AS n FROM tasks WHERE idempotency_key LIKE $1", [`bench-${tag}-%`]);

  const delivery = async (n, dist, tag) => {
    const { url, client, relays, release } = await instances(n, dist, tag, "d");
    const events = cfg.delivery.events;
    // Due a few seconds from now: every instance is up and idle by then, and each wakes for the due
    // time on its own (an UPDATE releasing them would cost the server as much as a small share of the work).
    // Held (quick): released by that UPDATE and a NOTIFY once the window is open.
    const dueAt = Date.now() + (cfg.delivery.heldS ?? cfg.delivery.startS) * 1000;
    await seedOutbox(url, client.id, events, hookUrl, { dueAt, ...(cfg.shareRelays ? { keyTag: tag } : {}) });
    await receiver.call("reset");
    try {
      await checkpoint(admin);
      if (!cfg.delivery.heldS) {
        if (Date.now() > dueAt - 300) log(`  !! ${n} instance(s) took longer than ${cfg.delivery.startS} s to start`);
        await sleep(Math.max(0, dueAt - 300 - Date.now()));
      }
      const end = await window(server, admin, dbOf(url), relays, [adminPid]);
      if (cfg.delivery.heldS) await releaseHeld(url, dueAt);
      const complete = await receiver.call("waitFor", { count: events, timeoutMs: cfg.delivery.windowS * 1000 });
      const stats = await receiver.call("stats");
      // The rate between the first and the last arrival (the window's CPU includes the wait for the due time).
      return { ...(await end(stats.count)), rate: round(stats.rate ?? 0, 1), complete, unique: stats.unique };
    } finally {
      await release();
    }
  };

  const intake = async (n, dist, tag) => {
    const { url, client, relays, release } = await instances(n, dist, tag, "i");
    const per = Math.max(1, Math.floor(cfg.intake.connections / n));
    const opts = (prefix) =>
      relays.map((relay, i) => ({
        url: relay.url,
        apiKey: client.api_key,
        keyPrefix: `${prefix}-${tag}-${i}-`,
        body: creationBody(PUBLIC_CALLBACK),
        connections: per,
        ...(cfg.intake.amount ? { amount: Math.ceil(cfg.intake.amount / n) } : { duration: cfg.intake.duration }),
      }));
    try {
      if (cfg.intake.warmup)
        await Promise.all(opts("warm").map((o) => load({ ...o, amount: undefined, duration: cfg.intake.warmup })));
      await checkpoint(admin);
      const end = await window(server, admin, dbOf(url), relays, [adminPid]);
      const results = await Promise.all(opts("bench").map((o) => load(o)));
      const accepted = results.reduce((s, r) => s + r.accepted, 0);
      const out = await end(accepted);
      // BENCH_SCALEOUT_IDLE_S: the relays' own CPU for that long after the load stops, the accepted
      // tasks waiting (what an instance costs per second whatever the creations: loops, wake-ups).
      const idleS = Number(process.env.BENCH_SCALEOUT_IDLE_S ?? 0);
      if (idleS > 0) {
        const cpu0 = relays.map((r) => cpuMsOf(r.pid));
        await sleep(idleS * 1000);
        out.idle_relay_cpu_ms_per_s = round(relays.reduce((s, r, i) => s + cpuMsOf(r.pid) - cpu0[i], 0) / idleS, 2);
      }
      const committed = await committedOf(url, tag);
      return { ...out, durable: committed >= accepted, p99_ms: Math.max(...results.map((r) => r.p99_ms)) };
    } finally {
      await release();
    }
  };

  const endToEnd = async (n, dist, tag) => {
    const { url, client, relays, release } = await instances(n, dist, tag, "e");
    await receiver.call("reset");
    try {
      await checkpoint(admin);
      const end = await window(server, admin, dbOf(url), relays, [adminPid]);
      const per = Math.max(1, Math.floor(cfg.e2e.connections / n));
      await Promise.all(
        relays.map((relay, i) =>
          load({
            url: relay.url,
            apiKey: client.api_key,
            keyPrefix: `bench-${tag}-${i}-`,
            body: creationBody(hookUrl),
            connections: per,
            amount: Math.ceil(cfg.e2e.tasks / n),
          }),
        ),
      );
      const committed = await committedOf(url, tag);
      const complete = await receiver.call("waitFor", { count: committed, timeoutMs: cfg.e2e.drainS * 1000 });
      const stats = await receiver.call("stats");
      return { ...(await end(stats.count)), committed, complete };
    } finally {
      await release();
    }
  };

  // BENCH_SCALEOUT_KINDS=intake,end_to_end: only those measurements (a shorter A/B run).
  const only = process.env.BENCH_SCALEOUT_KINDS?.split(",");
  const kinds = Object.fromEntries(
    Object.entries({ delivery, intake, end_to_end: endToEnd }).filter(([k]) => !only || only.includes(k)),
  );
  const rounds = [];
  try {
    for (let r = 1; r <= cfg.rounds; r++) {
      const entry = { round: r };
      for (const [kind, fn] of Object.entries(kinds)) {
        for (const n of cfg.instances) {
          // Alternating which build goes first cancels slow drifts of the machine's load.
          const order = (r + n) % 2 === 0 ? builds : [...builds].reverse();
          for (const [build, dist] of order) {
            if (dist === PROTO && kind !== "intake") continue;
            const x = await fn(n, dist, `${build}_${kind.slice(0, 1)}${n}_r${r}`);
            entry[build] ??= {};
            entry[build][kind] ??= {};
            entry[build][kind][n] = x;
            log(
              `  round ${r} ${build.padEnd(3)} ${kind.padEnd(10)} ${n} instance(s): ${x.rate}/s, ${x.cpu_ms_per_unit} CPU-ms/unit (relay ${x.relay_cpu_ms_per_unit} + PostgreSQL ${x.pg_cpu_ms_per_unit})${x.statements_per_unit !== undefined ? `, ${x.statements_per_unit} statements/unit (${x.statement_ms_per_unit} ms executing, ${x.plan_ms_per_unit} planning)` : ""}, ${x.notifies_per_unit !== undefined ? `${x.notifies_per_unit} pg_notify statements/unit, ` : ""}${x.wal_bytes_per_unit} WAL B/unit, ${x.commits_per_unit} commits/unit, ${x.locks.mean_sessions_waiting} sessions waiting on locks; backends by wait ${JSON.stringify(x.locks.backends_by_wait_event)}${x.idle_relay_cpu_ms_per_s !== undefined ? `; relays idle after: ${x.idle_relay_cpu_ms_per_s} CPU-ms/s` : ""}${x.complete === false ? " !! incomplete" : ""}`,
            );
          }
        }
      }
      await stopShared();
      rounds.push(entry);
    }
  } finally {
    await stopShared();
    await admin.end().catch(() => {});
    if (!pgServer) await server.stop();
  }

  // Medians over rounds of every figure; the 3:1 (or largest:1) ratio of total CPU per unit.
  const top = cfg.instances[cfg.instances.length - 1];
  const summary = {};
  for (const [build] of builds) {
    summary[build] = {};
    for (const kind of Object.keys(kinds)) {
      if (build === PROTO && kind !== "intake") continue;
      const cells = {};
      for (const n of cfg.instances) {
        const xs = rounds.map((x) => x[build][kind][n]);
        const med = (pick) => {
          const v = xs.map(pick).filter((y) => typeof y === "number");
          return v.length ? round(median(v), 3) : null;
        };
        cells[n] = {
          rate: med((x) => x.rate),
          cpu_ms_per_unit: med((x) => x.cpu_ms_per_unit),
          relay_cpu_ms_per_unit: med((x) => x.relay_cpu_ms_per_unit),
          pg_cpu_ms_per_unit: med((x) => x.pg_cpu_ms_per_unit),
          statements_per_unit: med((x) => x.statements_per_unit),
          statement_ms_per_unit: med((x) => x.statement_ms_per_unit),
          plan_ms_per_unit: med((x) => x.plan_ms_per_unit),
          wal_bytes_per_unit: med((x) => x.wal_bytes_per_unit),
          commits_per_unit: med((x) => x.commits_per_unit),
          mean_sessions_waiting: med((x) => x.locks.mean_sessions_waiting),
          lock_types: xs[xs.length - 1].locks.by_type,
          wait_events: xs[xs.length - 1].locks.backends_by_wait_event,
          top_statements: xs[xs.length - 1].top_statements,
          complete: xs.every((x) => x.complete !== false && x.durable !== false),
        };
      }
      const ratio = round(
        median(rounds.map((x) => x[build][kind][top].cpu_ms_per_unit / x[build][kind][1].cpu_ms_per_unit)),
        3,
      );
      summary[build][kind] = { instances: cells, [`ratio_${top}_to_1`]: ratio, met: ratio <= SCALEOUT_GOAL };
    }
  }
  return {
    method: `1${cfg.instances
      .slice(1)
      .map((n) => `, ${n}`)
      .join(
        "",
      )} instances of the built relay on one embedded PostgreSQL 18 (loopback, fsync=on, synchronous_commit=on, pg_stat_statements preloaded), a fresh database per measurement. Per unit: relay CPU (user + system of every instance measured, /proc/<pid>/stat) + PostgreSQL CPU (the postmaster and all its children, the bench's own backends left out) over the measured window; statements and their execution time from pg_stat_statements (this database only); WAL bytes from pg_current_wal_lsn() before and after (each window starts with a CHECKPOINT and none comes during it: checkpoint_timeout=1h, max_wal_size=4GB); write transactions (commits) from txid_current() before and after; pg_locks sampled every 50 ms for locks not granted (mean sessions waiting, by lock type and mode). Delivery: ${cfg.delivery.events} task.succeeded events written before the instances start, ${cfg.delivery.heldS ? "held until the window is open, then released by one UPDATE and a NOTIFY" : `due ${cfg.delivery.startS} s after the writing (every instance up and idle by then)`}${cfg.shareRelays ? " (quick: one database and set of instances per upstream, growing with the count; delivery and intake on the same set)" : ""}, CPU from just before the due time to the last arrival at the loopback receiver, rate between the first and the last arrival. Intake: autocannon per instance, ${cfg.intake.connections} connections split between them, ${cfg.intake.duration ? `${cfg.intake.duration} s after ${cfg.intake.warmup} s of warm-up` : `${cfg.intake.amount} requests`}, upstream held at one running task; every 201 checked to be a committed row. End to end: ${cfg.e2e.tasks} creations spread over the instances, simulator at 0 ms, from the first creation to the last webhook. ${cfg.rounds} round(s), medians; the ratio is ${top} instances' CPU per unit over one instance's (goal ≤ ${SCALEOUT_GOAL}).${oldDist ? ` "old" is ${oldDist}, measured side by side in the same run.` : ""}`,
    settings,
    statements: server.statements,
    goal: SCALEOUT_GOAL,
    builds: Object.fromEntries(builds.map(([b, d]) => [b, d])),
    ...summary,
    rounds,
  };
}

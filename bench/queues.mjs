// Queue destinations (docs/destinations.md, docs/performance.md "Queue destinations"): for each kind
// (amqp, nats, sqs), messages/s and CPU-ms per message of the built relay against the broker's own
// client publishing the same bodies to the same broker in the same run (bench/raw-queue.mjs), order
// rotated per round, medians of the rounds; for amqp and nats also the durable prototype
// (bench/proto/queue-delivery.mjs: the relay's claim, signature and attempt records around the same
// publish), the floor any durable relay pays, so relay ÷ prototype and prototype ÷ raw; and the time from `task.succeeded` (the event's
// creation) to a consumer receiving the message, p50/p95.
//
// Standalone: `node bench/queues.mjs` (after `npm run build`); in the suite: BENCH_ONLY=queues
// node bench/run.mjs. BENCH_QUEUES_OLD_DIST=<dist of another build> measures that build beside this
// one (e.g. /work/base/dist). BENCH_ROUNDS (default 3), BENCH_QUEUE_EVENTS (default 5,000),
// BENCH_QUEUE_TASKS (latency tasks per kind, default 100), BENCH_QUEUE_KINDS (default amqp,nats,sqs).
import { CreateQueueCommand, PurgeQueueCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect as natsConnect } from "@nats-io/transport-node";
import amqp from "amqplib";
import Database from "better-sqlite3";
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Webhook } from "standardwebhooks";
import { startNats, startRabbit, startSqs } from "./lib/brokers.mjs";
import { DIST } from "./lib/dist.mjs";
import {
  BENCH,
  createClient,
  FAST_SIMULATOR_ENV,
  ipcChild,
  sleep,
  startRelay,
  startNode,
  startSimulator,
  treeCpuDelta,
  treeCpuSnapshot,
} from "./lib/proc.mjs";
import { pendingEventRows, prepareSeeding } from "./lib/seed.mjs";
import { queuesRows } from "./lib/report.mjs";
import { distribution, median, round } from "./lib/stats.mjs";

const KINDS = ["amqp", "nats", "sqs"];
/** The kinds with a durable prototype (bench/proto/queue-delivery.mjs): the floor of any relay. */
const PROTO_KINDS = ["amqp", "nats"];
/** The relay's publishes in flight per delivery key (WEBHOOK_MAX_IN_FLIGHT_PER_HOST default): the raw client's too. */
const IN_FLIGHT = 8;
/** Seeded events fall due this long after the relay starts, so its start-up CPU stays out of the figure. */
const DUE_AFTER_MS = 6_000;
/** The same in a quick run, for the prototype (its start is a fraction of the relay's; no figure is kept). */
const QUICK_DUE_AFTER_MS = 1_500;

const envInt = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);

/** What a run has started and must stop (brokers, simulator, raw client), also on SIGINT/SIGTERM. */
const running = new Set();
export async function stopQueueBenchmark() {
  for (const stop of [...running].reverse()) {
    running.delete(stop);
    await Promise.resolve(stop()).catch(() => {});
  }
}

export async function benchQueues({
  rounds = envInt("BENCH_ROUNDS", 3),
  events = envInt("BENCH_QUEUE_EVENTS", 5_000),
  latencyTasks = envInt("BENCH_QUEUE_TASKS", 100),
  kinds = (process.env.BENCH_QUEUE_KINDS ?? KINDS.join(",")).split(",").filter(Boolean),
  oldDist = process.env.BENCH_QUEUES_OLD_DIST ? resolve(process.env.BENCH_QUEUES_OLD_DIST) : null,
  // The smoke run's (BENCH_QUICK): one relay per build measures every kind's latency and then drains
  // each kind's outbox, one start instead of six; the events fall due when it is up.
  quick = false,
  log = (...a) => process.stdout.write(`${a.join(" ")}\n`),
} = {}) {
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-bench-queues-"));
  const stops = {
    push: (...fns) => {
      for (const f of fns) running.add(f);
    },
  };
  const loadAtStart = os.loadavg().map((x) => round(x, 2));
  try {
    await prepareSeeding();
    log(`queues: starting RabbitMQ, NATS, SQS (local-aws-sqs) and the simulator; load ${loadAtStart.join(" ")}`);
    const [rabbit, nats, sqs] = await Promise.all([startRabbit(), startNats(), startSqs(join(tmp, "sqs.log"))]);
    stops.push(rabbit.stop, nats.stop, sqs.stop);
    const sim = await startSimulator(FAST_SIMULATOR_ENV, join(tmp, "sim.log"));
    stops.push(() => sim.stop());
    const admin = await adminClients(rabbit, nats, sqs, ["raw", ...(oldDist ? ["relay", "old"] : ["relay"])]);
    stops.push(admin.close);
    const raw = ipcChild("raw-queue", join(BENCH, "raw-queue.mjs"), join(tmp, "raw-queue.log"));
    stops.push(() => raw.stop());

    const builds = [{ name: "relay", dist: DIST }, ...(oldDist ? [{ name: "old", dist: oldDist }] : [])];
    for (const b of builds) {
      b.template = join(tmp, `template-${b.name}.db`);
      b.client = await createClient(b.template, "bench", b.dist);
    }
    const targets = (side) => ({
      amqp: {
        endpoint: { type: "amqp", url: rabbit.url, exchange: "bench", routing_key: "bench.amqp" },
        raw: { url: rabbit.url, exchange: "bench", routingKey: "bench.amqp" },
      },
      nats: {
        endpoint: { type: "nats", url: nats.url, subject: "bench.nats" },
        raw: { url: nats.url, subject: "bench.nats" },
      },
      sqs: {
        endpoint: {
          type: "sqs",
          queue_url: admin.queueUrls[side],
          region: sqs.region,
          access_key_id: "test",
          secret_access_key: "test",
          endpoint: sqs.url,
        },
        raw: { endpoint: sqs.url, queueUrl: admin.queueUrls.raw, region: sqs.region },
      },
    });

    // Per kind and build: a database holding the client and the kind's endpoint, and the latency.
    const latency = {};
    const dbs = {};
    // Quick: one relay per build for every kind, on one database that gains each kind's endpoint as
    // its latency is measured (a kind's consumer sees only the tasks of its own measurement: the
    // later kinds' endpoints do not exist yet); it stays up for the delivery measurements and stops
    // with the run's processes.
    const quickRelays = new Map();
    for (const kind of kinds) {
      latency[kind] = {};
      dbs[kind] = {};
      for (const b of builds) {
        let path = join(tmp, `${kind}-${b.name}.db`);
        let relay = quickRelays.get(b.name)?.relay;
        if (relay) path = quickRelays.get(b.name).path;
        else {
          copyDb(b.template, path);
          relay = await startRelay(relayEnv(path, sim.url), join(tmp, `relay-${kind}-${b.name}-latency.log`), {
            dist: b.dist,
          });
          if (quick) {
            stops.push(() => relay.stop());
            quickRelays.set(b.name, { path, relay });
          }
        }
        try {
          const ep = await post(
            relay.url,
            b.client.api_key,
            "/openapi/v1/webhooks/endpoints",
            targets(b.name)[kind].endpoint,
          );
          dbs[kind][b.name] = { path, endpointId: ep.data.id };
          await admin.purge(kind);
          latency[kind][b.name] = await measureLatency({
            kind,
            side: b.name,
            relay,
            client: b.client,
            path,
            admin,
            tasks: latencyTasks,
          });
          if (quick) dbs[kind][b.name].relay = relay;
        } finally {
          if (!quick) await relay.stop();
        }
        await admin.purge(kind);
        const l = latency[kind][b.name];
        log(
          `  ${kind} ${b.name}: task.succeeded → consumer p50 ${l.p50} ms, p95 ${l.p95} ms, max ${l.max} ms (${l.n}/${latencyTasks} received, signature ${l.verified ? "verified" : "NOT verified"})`,
        );
      }
    }

    const perRound = {};
    for (const kind of kinds) perRound[kind] = [];
    for (let r = 1; r <= rounds; r++) {
      for (const kind of kinds) {
        const sides = ["raw", ...(PROTO_KINDS.includes(kind) ? ["proto"] : []), ...builds.map((b) => b.name)];
        // Rotated per round: slow drifts of a shared machine fall on each side in turn.
        const order = sides.map((_, i) => sides[(i + r - 1) % sides.length]);
        const entry = { round: r, order };
        for (const side of order) {
          await admin.purge(kind);
          if (side === "raw") {
            entry.raw = await measureRaw({
              raw,
              kind,
              target: targets("raw")[kind].raw,
              body: admin.sampleBody,
              events,
            });
          } else if (side === "proto") {
            // The prototype drains a copy of the new build's database (same client, rows and endpoint).
            entry.proto = await measureRelay({
              kind,
              build: { ...builds[0], name: "proto" },
              db: dbs[kind].relay,
              simUrl: sim.url,
              events,
              tmp,
              r,
              admin,
              quick,
              start: (env, logFile) => startProto(kind, targets("raw")[kind].raw, env, logFile),
            });
          } else {
            const b = builds.find((x) => x.name === side);
            entry[side] = await measureRelay({
              kind,
              build: b,
              db: dbs[kind][side],
              simUrl: sim.url,
              events,
              tmp,
              r,
              admin,
              quick,
            });
          }
        }
        await admin.purge(kind);
        perRound[kind].push(entry);
        log(
          `  round ${r} ${kind} (${order.join(" → ")}): ${sides
            .map(
              (s) =>
                `${s} ${round(entry[s].rate)}/s ${round(entry[s].cpu_ms_per_message, 3)} CPU-ms/msg${entry[s].failed ? ` (${entry[s].failed} failed)` : ""}`,
            )
            .join(" | ")}`,
        );
      }
    }

    const result = {
      method: `Per kind, ${events} task.succeeded events (real webhook bodies, ${Buffer.byteLength(admin.sampleBody)} bytes) written to the outbox of the built relay's SQLite database for one endpoint of that kind, due ${DUE_AFTER_MS / 1000} s after the relay starts (so start-up is not measured). Rate: events / (first attempt → last confirmed delivery, from the database). CPU: user + system of the relay process and its descendants (/proc/<pid>/stat) from just before the due time to the last delivery, per message. Raw: bench/raw-queue.mjs, the broker's own client (amqplib confirm channel with mandatory and persistent; @nats-io/jetstream publish awaiting the PubAck with Nats-Msg-Id; @aws-sdk/client-sqs SendMessage with the attributes) publishing the same body with headers of the same names and sizes, ${IN_FLIGHT} in flight (the relay's WEBHOOK_MAX_IN_FLIGHT_PER_HOST), connection opened before the clock starts; its CPU from /proc. Prototype (amqp, nats): bench/proto/queue-delivery.mjs on a copy of the relay's database, the claim / HMAC / batched attempt records of bench/proto/delivery.mjs (64 per claim, records every 20 ms or 64, WAL + synchronous=FULL) publishing through the raw client's code, ${IN_FLIGHT} in flight; its CPU measured as the relay's. The sides' order rotates per round; figures are medians of ${rounds} round(s), the ratio the median of per-round ratios. Latency: ${latencyTasks} tasks created through the API at 20/s against the simulator (0 ms), each task.succeeded from its event's created_at to a consumer receiving the message (amqplib consume; JetStream ordered consumer; SQS ReceiveMessage long poll, 10 per call), one message per kind verified with standardwebhooks. Brokers on loopback: Debian's rabbitmq-server and nats-server -js, local-aws-sqs in its own process.`,
      in_flight: IN_FLIGHT,
      events,
      load_average_at_start: loadAtStart,
      load_average_at_end: os.loadavg().map((x) => round(x, 2)),
      builds: Object.fromEntries(builds.map((b) => [b.name, b.dist])),
      kinds: {},
    };
    for (const kind of kinds) {
      const rs = perRound[kind];
      const summary = (side) => ({
        rate: round(median(rs.map((e) => e[side].rate)), 1),
        cpu_ms_per_message: round(median(rs.map((e) => e[side].cpu_ms_per_message)), 3),
      });
      const k = { raw: summary("raw"), rounds: rs, latency_ms: latency[kind] };
      if (PROTO_KINDS.includes(kind)) {
        k.proto = summary("proto");
        k.proto.cpu_over_raw = round(median(rs.map((e) => e.proto.cpu_ms_per_message / e.raw.cpu_ms_per_message)), 2);
        k.proto.complete = rs.every((e) => e.proto.delivered === events);
      }
      for (const b of builds) {
        k[b.name] = summary(b.name);
        k[b.name].raw_over_relay = round(median(rs.map((e) => e.raw.rate / e[b.name].rate)), 2);
        k[b.name].cpu_over_raw = round(
          median(rs.map((e) => e[b.name].cpu_ms_per_message / e.raw.cpu_ms_per_message)),
          2,
        );
        if (k.proto)
          k[b.name].cpu_over_proto = round(
            median(rs.map((e) => e[b.name].cpu_ms_per_message / e.proto.cpu_ms_per_message)),
            2,
          );
        k[b.name].complete = rs.every((e) => e[b.name].delivered === events);
        k[b.name].verified = rs.every((e) => e[b.name].verified);
      }
      result.kinds[kind] = k;
    }
    return result;
  } finally {
    await stopQueueBenchmark();
    if (process.env.BENCH_KEEP !== "1") rmSync(tmp, { recursive: true, force: true });
    else log(`kept ${tmp}`);
  }
}

function relayEnv(path, simUrl) {
  return {
    DATABASE_PATH: path,
    UPSTREAM_BASE_URL: simUrl,
    UPSTREAM_API_KEY: "sandbox",
    LOG_LEVEL: process.env.BENCH_RELAY_LOG_LEVEL || "info",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  };
}

function copyDb(from, to) {
  copyFileSync(from, to);
  if (existsSync(`${from}-wal`)) copyFileSync(`${from}-wal`, `${to}-wal`);
}

async function post(base, apiKey, path, json, idempotencyKey) {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      ...(idempotencyKey ? { "idempotency-key": idempotencyKey } : {}),
    },
    body: JSON.stringify(json),
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** The bench's own broker clients: declares the queue, stream and exchange; purges; consumes. */
async function adminClients(rabbit, nats, sqs, sides) {
  const model = await amqp.connect(rabbit.url);
  const ch = await model.createChannel();
  await ch.assertExchange("bench", "topic", { durable: true });
  await ch.assertQueue("bench", { durable: true });
  await ch.bindQueue("bench", "bench", "bench.amqp");
  const nc = await natsConnect({ servers: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "BENCH", subjects: ["bench.>"] });
  const sqsClient = new SQSClient({
    region: sqs.region,
    endpoint: sqs.url,
    credentials: { accessKeyId: "test", secretAccessKey: "test" },
  });
  // A queue per side: SQS purges at most once a minute, so each side's messages stay apart instead.
  const queueUrls = {};
  for (const side of sides)
    queueUrls[side] = (await sqsClient.send(new CreateQueueCommand({ QueueName: `bench-${side}` }))).QueueUrl;
  const sample = pendingEventRows("cli_sample", 1, "https://hooks.example.com/genrelay").sample;
  const toHeaders = (entries) => {
    const h = {};
    for (const [name, value] of entries) h[name.toLowerCase()] = Array.isArray(value) ? value[0] : value;
    return h;
  };
  return {
    queueUrls,
    sampleBody: sample,
    async purge(kind) {
      if (kind === "amqp") await ch.purgeQueue("bench");
      if (kind === "nats") await jsm.streams.purge("BENCH");
      // Best effort (once a minute per queue); a consumer tells the sides' messages apart by queue.
      if (kind === "sqs")
        for (const QueueUrl of Object.values(queueUrls))
          await sqsClient.send(new PurgeQueueCommand({ QueueUrl })).catch(() => {});
    },
    /** One message now in the kind's queue, as [body, headers], or null. */
    async one(kind, side) {
      if (kind === "amqp") {
        const m = await ch.get("bench", { noAck: true });
        return m ? [m.content.toString("utf8"), m.properties.headers] : null;
      }
      if (kind === "nats") {
        const m = await jsm.streams.getMessage("BENCH", { last_by_subj: "bench.nats" }).catch(() => null);
        return m ? [m.string(), toHeaders(m.header)] : null;
      }
      const out = await sqsClient.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrls[side], MessageAttributeNames: ["All"] }),
      );
      const m = out.Messages?.[0];
      return m
        ? [m.Body, toHeaders(Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.StringValue]))]
        : null;
    },
    /** Calls onMessage(webhookId, body, headers) for every message that arrives until stop(). */
    async consume(kind, side, onMessage) {
      if (kind === "amqp") {
        const c = await model.createChannel();
        await c.consume("bench", (m) => m && onMessage(m.content.toString("utf8"), m.properties.headers), {
          noAck: true,
        });
        return () => c.close();
      }
      if (kind === "nats") {
        const consumer = await jetstream(nc).consumers.get("BENCH");
        const messages = await consumer.consume();
        void (async () => {
          for await (const m of messages) onMessage(m.string(), toHeaders(m.headers ?? []));
        })();
        return () => messages.close();
      }
      let stopped = false;
      const loop = (async () => {
        while (!stopped) {
          const out = await sqsClient.send(
            new ReceiveMessageCommand({
              QueueUrl: queueUrls[side],
              MessageAttributeNames: ["All"],
              MaxNumberOfMessages: 10,
              WaitTimeSeconds: 1,
              VisibilityTimeout: 600,
            }),
          );
          for (const m of out.Messages ?? [])
            onMessage(m.Body, toHeaders(Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.StringValue])));
        }
      })();
      return async () => {
        stopped = true;
        await loop;
      };
    },
    async close() {
      await model.close().catch(() => {});
      await nc.close().catch(() => {});
      sqsClient.destroy();
    },
  };
}

/** Tasks created at 20/s; each task.succeeded from its event's created_at to a consumer's receipt. */
async function measureLatency({ kind, side, relay, client, path, admin, tasks }) {
  const received = new Map();
  let verified = null;
  const wh = new Webhook(client.webhook_secret);
  const stop = await admin.consume(kind, side, (body, headers) => {
    const id = headers["webhook-id"];
    if (!id || received.has(id)) return;
    received.set(id, Date.now());
    if (verified === null) {
      try {
        wh.verify(body, headers);
        verified = true;
      } catch {
        verified = false;
      }
    }
  });
  try {
    for (let i = 0; i < tasks; i++) {
      await post(
        relay.url,
        client.api_key,
        "/openapi/v1/images/generations",
        { model: "p-image", mode: "generate", prompt: `queue latency ${i}`, count: 1 },
        `latency-${kind}-${i}`,
      );
      await sleep(50);
    }
    const deadline = Date.now() + 60_000;
    while (received.size < tasks && Date.now() < deadline) await sleep(50);
  } finally {
    await stop();
  }
  const db = new Database(path, { readonly: true });
  const created = new Map(
    db
      .prepare("SELECT id, created_at FROM events WHERE type = 'task.succeeded' AND endpoint_id IS NULL")
      .all()
      .map((r) => [r.id, r.created_at]),
  );
  db.close();
  const ms = [...received].filter(([id]) => created.has(id)).map(([id, at]) => at - created.get(id));
  return { ...distribution(ms), verified: verified === true };
}

async function measureRaw({ raw, kind, target, body, events }) {
  await raw.call("connect", { kind, target });
  const headers = {
    "webhook-timestamp": String(Math.floor(Date.now() / 1000)),
    "webhook-signature": `v1,${Buffer.alloc(32, 7).toString("base64")}`,
    "content-type": "application/json",
  };
  const before = treeCpuSnapshot(raw.pid);
  const run = await raw.call("publish", {
    body,
    headers,
    total: events,
    concurrency: IN_FLIGHT,
    idPrefix: `evt_raw${Date.now().toString(36)}`,
  });
  const cpu = treeCpuDelta(before, treeCpuSnapshot(raw.pid));
  await raw.call("close");
  return { rate: run.rate, cpu_ms_per_message: cpu / Math.max(1, run.ok), failed: run.failed, seconds: run.seconds };
}

/** The built relay delivering `events` seeded events to the kind's endpoint. */
async function measureRelay({ kind, build, db, simUrl, events, tmp, r, admin, start, quick }) {
  // Quick: the relay of the latency measurements, still up on its database, drains events due at once;
  // a task created through its API nudges its dispatcher (an outside write does not).
  const live = quick && !start ? db.relay : null;
  const path = live ? db.path : join(tmp, `${kind}-${build.name}-r${r}.db`);
  if (!live) copyDb(db.path, path);
  const dueAfterMs = live ? 0 : quick ? QUICK_DUE_AFTER_MS : DUE_AFTER_MS;
  // Quick: the kinds share a database, so each seeding's task keys carry its endpoint and side.
  const keyTag = quick ? `${db.endpointId}-${build.name}-r${r}` : null;
  const seededAt = seedEndpointEvents(path, build.client.id, db.endpointId, events, dueAfterMs, keyTag);
  // BENCH_QUEUE_PROFILE=<dir>: a CPU profile of each relay measured (node --cpu-prof), for finding the cost.
  const profile = process.env.BENCH_QUEUE_PROFILE;
  const logFile = join(tmp, `relay-${kind}-${build.name}-r${r}.log`);
  const relay =
    live ??
    (start
      ? await start(relayEnv(path, simUrl), logFile)
      : await startRelay(relayEnv(path, simUrl), logFile, {
          dist: build.dist,
          execArgv: profile
            ? [
                "--cpu-prof",
                "--cpu-prof-dir",
                resolve(profile),
                `--cpu-prof-name=${kind}-${build.name}-r${r}.cpuprofile`,
              ]
            : [],
        }));
  const reader = new Database(path, { readonly: true });
  try {
    const dueAt = seededAt.dueAt;
    if (!live && Date.now() > dueAt - 300)
      process.stdout.write(`  !! the relay took longer than ${dueAfterMs} ms to start\n`);
    await sleep(Math.max(0, dueAt - 300 - Date.now()));
    const before = treeCpuSnapshot(relay.pid);
    if (live)
      await post(
        relay.url,
        build.client.api_key,
        "/openapi/v1/images/generations",
        { model: "p-image", mode: "generate", prompt: "nudge", count: 1 },
        `nudge-${kind}-r${r}`,
      );
    const delivered = reader.prepare(
      "SELECT count(*) AS n FROM events WHERE created_at = ? AND delivery_status = 'succeeded'",
    );
    const deadline = Date.now() + 120_000;
    let n = 0;
    while ((n = delivered.get(seededAt.createdAt).n) < events && Date.now() < deadline) await sleep(50);
    const cpu = treeCpuDelta(before, treeCpuSnapshot(relay.pid));
    const span = reader
      .prepare(
        `SELECT min(a.attempted_at) AS first, max(e.delivered_at) AS last,
                sum(CASE WHEN a.outcome = 'succeeded' THEN 0 ELSE 1 END) AS failed
           FROM events e JOIN delivery_attempts a ON a.event_id = e.id WHERE e.created_at = ?`,
      )
      .get(seededAt.createdAt);
    const sample = await admin.one(kind, build.name);
    let verified = false;
    try {
      if (sample) verified = Boolean(new Webhook(build.client.webhook_secret).verify(sample[0], sample[1]));
    } catch {}
    return {
      rate: n / Math.max(0.001, (span.last - span.first) / 1000),
      cpu_ms_per_message: cpu / Math.max(1, n),
      delivered: n,
      failed: span.failed ?? 0,
      seconds: (span.last - span.first) / 1000,
      verified,
    };
  } finally {
    reader.close();
    if (!live) {
      await relay.stop();
      for (const f of [path, `${path}-wal`, `${path}-shm`]) rmSync(f, { force: true });
    }
  }
}

/** bench/proto/queue-delivery.mjs on the database `env` names, publishing to the raw client's target. */
async function startProto(kind, target, env, logFile) {
  const child = startNode(`proto-queue-${kind}`, join(BENCH, "proto", "queue-delivery.mjs"), {
    env: { DATABASE_PATH: env.DATABASE_PATH, QUEUE_KIND: kind, QUEUE_TARGET: JSON.stringify(target) },
    logFile,
  });
  await child.waitFor(/proto-queue ready/);
  return child;
}

/** `count` due task.succeeded deliveries for one endpoint, as the relay's fan-out writes them. */
function seedEndpointEvents(path, clientId, endpointId, count, dueAfterMs, keyTag = null) {
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  const ep = db.prepare("SELECT url, destination_host FROM webhook_endpoints WHERE id = ?").get(endpointId);
  const { rows, TASK_COLUMNS, EVENT_COLUMNS } = pendingEventRows(clientId, count, ep.url, ep.destination_host);
  const dueAt = Date.now() + dueAfterMs;
  const columns = [...EVENT_COLUMNS, "client_seq", "destination_host", "endpoint_id", "webhook_id"];
  const insert = (table, cols) =>
    db.prepare(`INSERT INTO ${table} (${cols.join(", ")}) VALUES (${cols.map((c) => `@${c}`).join(", ")})`);
  const insertTask = insert("tasks", TASK_COLUMNS);
  const insertEvent = insert("events", columns);
  db.transaction(() => {
    for (const { task, event } of rows) {
      insertTask.run(keyTag ? { ...task, idempotency_key: `${task.idempotency_key}-${keyTag}` } : task);
      insertEvent.run({
        ...event,
        id: `${event.id}_${endpointId}`,
        webhook_id: event.id,
        endpoint_id: endpointId,
        // An endpoint's row is not in the pull feed (store/endpoint-fanout.ts NOT_IN_FEED).
        client_seq: -1,
        next_attempt_at: dueAt,
      });
    }
  })();
  db.close();
  return { dueAt, createdAt: rows[0].event.created_at };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const signal of ["SIGINT", "SIGTERM"])
    process.once(signal, () => void stopQueueBenchmark().finally(() => process.exit(130)));
  const result = await benchQueues();
  process.stdout.write(`${JSON.stringify(result, (k, v) => (k === "rounds" ? undefined : v), 2)}\n`);
  for (const row of queuesRows(result)) process.stdout.write(`| ${row.join(" | ")} |\n`);
}

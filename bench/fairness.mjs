// Delivery fairness and partly working receivers in REAL time (issue 21, docs/contract.md, "Delivery to real receivers"), against
// the built relay (`node dist/main.js`) and the simulator (zero processing time, no read limit) as
// their own processes, with every receiver a node:http server in this process on loopback:
//
//   slow_receivers   client A points its callbacks at `hosts` loopback servers that answer 200 after
//                    `delayMs` (under WEBHOOK_TIMEOUT_MS: never a failure, never a breaker) and creates
//                    `attack` tasks at once; once A's webhooks are in flight, client B (a receiver that
//                    answers at once) creates one task a second. Reported: B's delay (webhook arrival −
//                    the event's data.completed_at, the instant the relay recorded the end and the
//                    event became due; and arrival − the task's completion in the simulator, which adds
//                    the poller's detection), A's most attempts in flight (counted at A's servers).
//   partly_working   WEBHOOK_RETRY_SCHEDULE=0s,1s,... and one client whose receiver (a) answers 503 to
//                    the first attempt of every webhook (by webhook-id) and 200 to the retry, or (b)
//                    answers 503 to half of all requests at random (seeded). Reported: how long after
//                    the last task completed upstream the last webhook was accepted, and how many were
//                    still without a 2xx at the checkpoints (60 s and 180 s after that completion).
//
// Each scenario runs on the current build and, when `oldDist` is given (BENCH_FAIRNESS_OLD_DIST, a
// dist/ of another commit with its ../migrations and a node_modules it resolves), on that build too,
// in the same run: an A/B. Each run has its own simulator and its own SQLite file.
//
// `node bench/fairness.mjs` runs it alone (BENCH_QUICK=1: the small variant) and prints the result.
import Database from "better-sqlite3";
import { createServer } from "node:http";
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { DIST, distImport } from "./lib/dist.mjs";
import { createClient, FAST_SIMULATOR_ENV, sleep, startRelay, startSimulator } from "./lib/proc.mjs";
import { distribution, round } from "./lib/stats.mjs";

export const FAIRNESS_CONFIG = {
  full: {
    slow: {
      hosts: 10,
      delayMs: 14_000,
      timeoutMs: 15_000,
      attacks: [120, 360],
      victimTasks: 20,
      victimEveryMs: 1_000,
      victimWaitS: 150,
    },
    partly: { tasks: 40, schedule: "0s,1s,1s,1s,1s,1s,1s,1s", capS: 180, checkpointsS: [60, 180], seed: 21 },
  },
  quick: {
    slow: {
      hosts: 2,
      delayMs: 2_000,
      timeoutMs: 3_000,
      attacks: [20],
      victimTasks: 3,
      victimEveryMs: 500,
      victimWaitS: 30,
    },
    partly: { tasks: 6, schedule: "0s,1s,1s,1s,1s,1s,1s,1s", capS: 30, checkpointsS: [10, 30], seed: 21 },
  },
};

const IMAGE_PATH = "/openapi/v1/images/generations";
const TERMINAL = new Set(["task.succeeded", "task.failed", "task.canceled"]);

/**
 * A loopback receiver. `decide(webhookId, attemptOfThisWebhook)` returns { status, delayMs }.
 * Records, per upstream task id of a terminal event, every attempt and the first 2xx; counts requests in flight.
 */
function receiver(decide = () => ({ status: 200, delayMs: 0 })) {
  const tasks = new Map(); // upstream task id -> { attempts, acceptedAt, completedAt, timestamp }
  const byWebhook = new Map(); // webhook-id -> attempts seen
  const timers = new Set();
  const stats = { requests: 0, refused: 0, inFlight: 0, maxInFlight: 0 };
  const server = createServer((req, res) => {
    stats.requests++;
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    group?.enter();
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const webhookId = String(req.headers["webhook-id"] ?? "");
      const attempt = (byWebhook.get(webhookId) ?? 0) + 1;
      byWebhook.set(webhookId, attempt);
      const { status, delayMs } = decide(webhookId, attempt);
      const answer = () => {
        timers.delete(timer);
        if (res.destroyed) return;
        const at = Date.now();
        res.writeHead(status, { "content-length": "0" });
        res.end();
        if (status >= 300) stats.refused++;
        let event = null;
        try {
          event = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          return;
        }
        const id = event?.data?.upstream_task_id;
        if (!id || !TERMINAL.has(event.type)) return;
        const t = tasks.get(id) ?? { attempts: 0, acceptedAt: null, completedAt: NaN, timestamp: NaN };
        t.attempts++;
        t.completedAt = event.data.completed_at ? Date.parse(event.data.completed_at) : NaN;
        t.timestamp = event.timestamp ? Date.parse(event.timestamp) : NaN;
        if (status < 300 && t.acceptedAt === null) t.acceptedAt = at;
        tasks.set(id, t);
        onAnswer();
      };
      const timer = setTimeout(answer, delayMs);
      timers.add(timer);
    });
    res.on("close", () => {
      stats.inFlight--;
      group?.leave();
    });
  });
  let group = null;
  let onAnswer = () => {};
  const accepted = () => [...tasks.values()].filter((t) => t.acceptedAt !== null).length;
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/hooks/fairness`,
        tasks,
        stats,
        accepted,
        /** Counts this server's requests in flight into a group's total too (A's servers together). */
        join(g) {
          group = g;
        },
        /** Resolves true once n tasks have a 2xx'd webhook, false after timeoutMs. */
        waitFor(n, timeoutMs) {
          return new Promise((done) => {
            const finish = (ok) => {
              clearTimeout(timer);
              onAnswer = () => {};
              done(ok);
            };
            const timer = setTimeout(() => finish(false), timeoutMs);
            onAnswer = () => {
              if (accepted() >= n) finish(true);
            };
            onAnswer();
          });
        },
        close: () =>
          new Promise((r) => {
            for (const t of timers) clearTimeout(t);
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}

/** Requests in flight across several receivers (one client's hosts), with its maximum overall and inside a window. */
function inFlightGroup() {
  const g = {
    now: 0,
    max: 0,
    windowMax: null,
    enter() {
      g.now++;
      g.max = Math.max(g.max, g.now);
      if (g.windowMax !== null) g.windowMax = Math.max(g.windowMax, g.now);
    },
    leave() {
      g.now--;
    },
    openWindow() {
      g.windowMax = g.now;
    },
  };
  return g;
}

async function createTask(relayUrl, apiKey, key, hookUrl) {
  const res = await fetch(`${relayUrl}${IMAGE_PATH}`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify({
      model: "p-image",
      mode: "generate",
      count: 1,
      prompt: `fairness bench ${key}: a lighthouse at dawn`,
      callback_url: hookUrl,
    }),
  });
  await res.arrayBuffer();
  if (res.status !== 201) throw new Error(`creation ${key} answered ${res.status}`);
}

/** Creates n tasks, `concurrency` at a time; task i calls back to hookFor(i). */
async function createAll(relayUrl, apiKey, prefix, n, hookFor, concurrency = 16) {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++)
      await createTask(relayUrl, apiKey, `${prefix}-${String(i).padStart(5, "0")}`, hookFor(i));
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

async function simTasks(sim) {
  const res = await fetch(`${sim.url}/_sim/tasks?api_key=sandbox`);
  if (!res.ok) throw new Error(`GET /_sim/tasks: ${res.status}`);
  return (await res.json()).data;
}

/** Tasks by status and events by delivery status in a run's database (read after the relay stopped): why a run was incomplete. */
function outboxState(databasePath) {
  const db = new Database(databasePath, { readonly: true, fileMustExist: true });
  try {
    const counts = (sql) =>
      Object.fromEntries(
        db
          .prepare(sql)
          .all()
          .map((r) => [r.k, r.n]),
      );
    return {
      tasks: counts("SELECT status AS k, count(*) AS n FROM tasks GROUP BY status"),
      events: counts("SELECT delivery_status AS k, count(*) AS n FROM events GROUP BY delivery_status"),
    };
  } finally {
    db.close();
  }
}

/** Runs so far in this process: each run's files (logs, database) get their own names. */
let run = 0;

const seconds = (ms) => (ms === null || ms === undefined || !Number.isFinite(ms) ? null : round(ms / 1000, 1));

export async function benchFairness({
  quick = false,
  tmp,
  track = (c) => c,
  log = () => {},
  logLevel = "info",
  oldDist = null,
}) {
  const cfg = quick ? FAIRNESS_CONFIG.quick : FAIRNESS_CONFIG.full;
  const builds = [{ name: "current", dist: DIST }];
  if (oldDist) builds.push({ name: "old", dist: oldDist });

  /** One simulator, one database, one relay of `build`, started with `env` (the clients made once per build). */
  async function startPair(build, tag, env) {
    const sim = track(
      await startSimulator({ SIM_API_KEYS: "sandbox", ...FAST_SIMULATOR_ENV }, join(tmp, `${tag}-sim.log`)),
    );
    const databasePath = join(tmp, `${tag}.db`);
    try {
      const clients = await clientsOf(build, databasePath);
      const relay = track(
        await startRelay(
          {
            DATABASE_PATH: databasePath,
            UPSTREAM_BASE_URL: sim.url,
            UPSTREAM_API_KEY: "sandbox",
            UPSTREAM_READS_PER_MINUTE: 100_000,
            UPSTREAM_MAX_CONCURRENT: 10_000,
            WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
            LOG_LEVEL: logLevel,
            ...env,
          },
          join(tmp, `${tag}-relay.log`),
          { dist: build.dist },
        ),
      );
      return { sim, relay, clients, databasePath, stop: () => relay.stop().finally(() => sim.stop()) };
    } catch (err) {
      await sim.stop();
      throw err;
    }
  }

  /** Clients a and b, made by the build's CLI once (a template file) and copied into each database. */
  const templates = new Map();
  async function clientsOf(build, databasePath) {
    if (!templates.has(build.name))
      templates.set(
        build.name,
        (async () => {
          const path = join(tmp, `fairness-template-${build.name}.db`);
          const a = await createClient(path, "fairness-a", build.dist);
          const b = await createClient(path, "fairness-b", build.dist);
          return { path, clients: { a, b } };
        })(),
      );
    const t = await templates.get(build.name);
    copyFileSync(t.path, databasePath);
    if (existsSync(`${t.path}-wal`)) copyFileSync(`${t.path}-wal`, `${databasePath}-wal`);
    return t.clients;
  }

  // Quick (the smoke run): one pair per build for every scenario, with all of their settings (the
  // slow receivers' timeout, the partly working ones' retry schedule); stopped at the end.
  const shared = new Map();
  const quickEnv = { WEBHOOK_TIMEOUT_MS: cfg.slow.timeoutMs, WEBHOOK_RETRY_SCHEDULE: cfg.partly.schedule };

  /** One simulator, one database, one relay of `build`; `body` gets them and returns the figures. */
  async function withRelay(build, label, extraEnv, body) {
    run++;
    const tag = `fairness-${run}-${build.name}-${label}`;
    if (quick && !shared.has(build.name)) shared.set(build.name, startPair(build, `fairness-${build.name}`, quickEnv));
    const pair = quick ? await shared.get(build.name) : await startPair(build, tag, extraEnv);
    const { databasePath } = pair;
    let result = null;
    try {
      result = await body(pair);
    } finally {
      if (!quick) await pair.stop();
    }
    if (!result.complete) {
      result.outbox_at_end = outboxState(databasePath);
      log(
        `  !! incomplete; at the end the database held tasks ${JSON.stringify(result.outbox_at_end.tasks)}, events ${JSON.stringify(result.outbox_at_end.events)} (relay log ${join(tmp, `${tag}-relay.log`)})`,
      );
    }
    return result;
  }

  // ---- 1. slow receivers (issue 21 item 2) ----
  async function slowReceivers(build, attack) {
    const s = cfg.slow;
    const group = inFlightGroup();
    const slow = await Promise.all(
      Array.from({ length: s.hosts }, () => receiver(() => ({ status: 200, delayMs: s.delayMs }))),
    );
    for (const r of slow) r.join(group);
    const victim = await receiver();
    try {
      return await withRelay(
        build,
        `slow${attack}`,
        { WEBHOOK_TIMEOUT_MS: s.timeoutMs },
        async ({ relay, sim, clients }) => {
          const t0 = Date.now();
          await createAll(relay.url, clients.a.api_key, "attack", attack, (i) => slow[i % slow.length].url);
          // B starts once A's attempts have been going for a second (the attack is under way).
          const deadline = Date.now() + 30_000;
          while (group.max === 0 && Date.now() < deadline) await sleep(50);
          await sleep(1_000);
          const inFlightAtStart = group.now;
          group.openWindow();
          const bStart = Date.now();
          for (let i = 0; i < s.victimTasks; i++) {
            const due = bStart + i * s.victimEveryMs;
            if (due > Date.now()) await sleep(due - Date.now());
            await createTask(relay.url, clients.b.api_key, `victim-${String(i).padStart(4, "0")}`, victim.url);
          }
          const complete = await victim.waitFor(s.victimTasks, s.victimWaitS * 1000);
          const windowMax = group.windowMax;
          const upstream = new Map((await simTasks(sim)).map((t) => [t.id, t]));
          const delivery = [];
          const fromUpstream = [];
          for (const [id, t] of victim.tasks) {
            if (t.acceptedAt === null) continue;
            delivery.push(t.acceptedAt - t.completedAt);
            const u = upstream.get(id);
            if (u) fromUpstream.push(t.acceptedAt - u.completed_at_ms);
          }
          const aDelivered = slow.reduce((n, r) => n + r.accepted(), 0);
          const perHostMax = Math.max(...slow.map((r) => r.stats.maxInFlight));
          // Cut A's attempts still waiting on its servers, so the relay stops without waiting them out.
          await Promise.all(slow.map((r) => r.close()));
          const result = {
            attack_tasks: attack,
            victim_tasks: s.victimTasks,
            victim_delivered: victim.accepted(),
            complete,
            victim_delivery_ms: distribution(delivery),
            victim_completion_to_webhook_ms: distribution(fromUpstream),
            attacker_max_in_flight: group.max,
            attacker_max_in_flight_while_victim_active: windowMax,
            attacker_in_flight_when_victim_started: inFlightAtStart,
            attacker_max_in_flight_per_host: perHostMax,
            attacker_delivered_by_end: aDelivered,
            run_seconds: seconds(Date.now() - t0),
          };
          const d = result.victim_delivery_ms;
          log(
            `  [${build.name}] ${attack} slow tasks: B ${result.victim_delivered}/${s.victimTasks} webhooks, delivery p50 ${d.p50} / p95 ${d.p95} / max ${d.max} ms (from upstream completion p50 ${result.victim_completion_to_webhook_ms.p50} / p95 ${result.victim_completion_to_webhook_ms.p95} / max ${result.victim_completion_to_webhook_ms.max} ms); A at most ${group.max} in flight (${windowMax} while B ran, ${perHostMax} per host), ${aDelivered}/${attack} of A's delivered by the end`,
          );
          return result;
        },
      );
    } finally {
      await Promise.all([...slow, victim].map((r) => r.close()));
    }
  }

  // ---- 2. partly working receivers (issue 21 item 1) ----
  async function partlyWorking(build, mode) {
    const p = cfg.partly;
    // The simulator's mulberry32, so the "half at random" receiver answers alike from run to run.
    const { seededRandom } = await distImport("simulator/state.js");
    const random = seededRandom(p.seed);
    const decide =
      mode === "first"
        ? (_id, attempt) => ({ status: attempt === 1 ? 503 : 200, delayMs: 0 })
        : () => ({ status: random() < 0.5 ? 503 : 200, delayMs: 0 });
    const hook = await receiver(decide);
    try {
      return await withRelay(
        build,
        `partly-${mode}`,
        { WEBHOOK_RETRY_SCHEDULE: p.schedule },
        async ({ relay, sim, clients }) => {
          await createAll(relay.url, clients.a.api_key, `partly-${mode}`, p.tasks, () => hook.url);
          // The tasks complete upstream at once (0 ms); the reference is the last of those instants.
          const lastCompletion = Math.max(...(await simTasks(sim)).map((t) => t.completed_at_ms));
          const complete = await hook.waitFor(p.tasks, Math.max(0, lastCompletion + p.capS * 1000 - Date.now()));
          const endedAt = Date.now();
          const upstream = new Map((await simTasks(sim)).map((t) => [t.id, t]));
          const accepted = [...hook.tasks.entries()].filter(([, t]) => t.acceptedAt !== null);
          const lastAccepted = accepted.length ? Math.max(...accepted.map(([, t]) => t.acceptedAt)) : null;
          const pendingAt = {};
          for (const s of p.checkpointsS) {
            const at = lastCompletion + s * 1000;
            // Known only if the run lasted that long, or every webhook was in before it.
            pendingAt[`${s}s`] =
              endedAt >= at || (complete && lastAccepted <= at)
                ? p.tasks - accepted.filter(([, t]) => t.acceptedAt <= at).length
                : null;
          }
          const attempts = [...hook.tasks.values()].map((t) => t.attempts);
          const scheduleLength = p.schedule.split(",").length;
          const result = {
            mode:
              mode === "first" ? "fails the first attempt of every webhook" : "fails half of all requests at random",
            tasks: p.tasks,
            delivered: accepted.length,
            complete,
            last_webhook_after_completion_s: lastAccepted === null ? null : seconds(lastAccepted - lastCompletion),
            pending_at: pendingAt,
            watched_s: seconds(endedAt - lastCompletion),
            completion_to_webhook_ms: distribution(
              accepted
                .map(([id, t]) => t.acceptedAt - (upstream.get(id)?.completed_at_ms ?? NaN))
                .filter(Number.isFinite),
            ),
            requests: hook.stats.requests,
            refused_503: hook.stats.refused,
            max_attempts_per_webhook: attempts.length ? Math.max(...attempts) : 0,
            exhausted: [...hook.tasks.values()].filter((t) => t.acceptedAt === null && t.attempts >= scheduleLength)
              .length,
          };
          log(
            `  [${build.name}] receiver that ${result.mode}: ${result.delivered}/${p.tasks} webhooks, the last ${result.last_webhook_after_completion_s} s after the last completion; pending ${Object.entries(
              pendingAt,
            )
              .map(([k, v]) => `${v ?? "?"} at ${k}`)
              .join(
                ", ",
              )}; ${result.requests} requests, ${result.refused_503} answered 503${result.exhausted ? `, ${result.exhausted} exhausted` : ""}`,
          );
          return result;
        },
      );
    } finally {
      await hook.close();
    }
  }

  async function scenarios(out) {
    for (const attack of cfg.slow.attacks) {
      log(
        `  slow receivers: ${attack} tasks of client A to ${cfg.slow.hosts} host:ports answering 200 after ${cfg.slow.delayMs / 1000} s; client B one task every ${cfg.slow.victimEveryMs / 1000} s × ${cfg.slow.victimTasks}`,
      );
      for (const build of builds) (out.slow_receivers[build.name] ??= []).push(await slowReceivers(build, attack));
    }
    for (const mode of ["first", "random"]) {
      log(
        `  partly working receiver (${mode}), ${cfg.partly.tasks} tasks, WEBHOOK_RETRY_SCHEDULE=${cfg.partly.schedule}, watched up to ${cfg.partly.capS} s`,
      );
      for (const build of builds) (out.partly_working[build.name] ??= {})[mode] = await partlyWorking(build, mode);
    }
  }

  const out = { slow_receivers: {}, partly_working: {} };
  try {
    await scenarios(out);
  } finally {
    for (const pair of await Promise.allSettled(shared.values()))
      if (pair.status === "fulfilled") await pair.value.stop();
  }
  return {
    method: `Real time, on loopback: the simulator (dist/simulator/main.js, 0 ms queued and processing, no read limit) and the relay (dist/main.js; temp SQLite, UPSTREAM_READS_PER_MINUTE=100000, WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, defaults otherwise: WEBHOOK_MAX_IN_FLIGHT 64, WEBHOOK_MAX_IN_FLIGHT_PER_HOST 8) as their own processes, a fresh pair per run${quick ? " (quick: one pair for every scenario, WEBHOOK_TIMEOUT_MS and WEBHOOK_RETRY_SCHEDULE both set)" : ""}; receivers are node:http servers in the bench process. Slow receivers: client A's ${cfg.slow.attacks.join(" and then ")} image tasks call back round-robin to ${cfg.slow.hosts} servers that answer 200 after ${cfg.slow.delayMs} ms (WEBHOOK_TIMEOUT_MS=${cfg.slow.timeoutMs}); 1 s after A's first attempt arrives, client B creates ${cfg.slow.victimTasks} tasks ${cfg.slow.victimEveryMs} ms apart to a receiver answering at once. B's delivery delay = arrival − data.completed_at (the relay's end instant, when the event is due; equal to the event's timestamp); from upstream completion = arrival − completed_at in the simulator (adds the poller's ~2 s first read). A's attempts in flight are counted at A's servers. Partly working: ${cfg.partly.tasks} tasks of one client, WEBHOOK_RETRY_SCHEDULE=${cfg.partly.schedule}; (first) 503 to the first request of each webhook-id, 200 after; (random) 503 to each request with probability 0.5 (mulberry32, seed ${cfg.partly.seed}). Times from the last task's completion in the simulator; pending = tasks without a 2xx'd webhook at that instant (null: not watched that long).${oldDist ? " 'old' is the build of another commit (BENCH_FAIRNESS_OLD_DIST), run right after 'current' in each scenario, with its own database and the same simulator build." : ""}`,
    config: cfg,
    builds: Object.fromEntries(
      builds.map((b) => [b.name, b.name === "current" ? "this commit (the run's dist snapshot)" : b.dist]),
    ),
    ...out,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-fairness-"));
  try {
    const result = await benchFairness({
      quick: process.env.BENCH_QUICK === "1",
      tmp,
      log: (...a) => console.log(...a),
      oldDist: process.env.BENCH_FAIRNESS_OLD_DIST || null,
    });
    console.log(JSON.stringify(result, null, 2));
  } finally {
    if (process.env.BENCH_KEEP === "1") console.log(`kept ${tmp}`);
    else rmSync(tmp, { recursive: true, force: true });
  }
}

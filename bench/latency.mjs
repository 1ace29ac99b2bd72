// Completion→webhook latency in REAL time at the read-budget limit (issue 15), beside the fake-time
// scheduling bench (bench/scheduling.mjs):
//
//   simulator  node dist/simulator/main.js, its own process: task durations drawn from a range,
//              a share failing at random, the documented 120 reads/min per account enforced
//   relay      node dist/main.js, its own process: UPSTREAM_* pointing at the simulator,
//              UPSTREAM_READS_PER_MINUTE=100, a temp DATABASE_PATH, WEBHOOK_ALLOW_PRIVATE_NETWORKS=true
//   receiver   node:http on loopback in this process, recording when each task's webhook arrives
//
// `tasks` creations (half images, half videos) go to the relay at once; each task's latency is the
// webhook's arrival minus the instant the simulator completed it (GET /_sim/tasks). Reads come from
// the simulator's own count for the account (GET /_sim/reads): reads per task and the busiest 60 s
// window, which must stay within UPSTREAM_READS_PER_MINUTE (the run is marked failed otherwise).
//
// `node bench/latency.mjs` runs it alone (BENCH_QUICK=1: the small variant) and prints the result.
import { createServer } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Webhook } from "standardwebhooks";
import { createClient, sleep, startRelay, startSimulator } from "./lib/proc.mjs";
import { distribution, round } from "./lib/stats.mjs";

export const LATENCY_GOAL = { p95Ms: 3_000 };
const READS_PER_MINUTE = 100;
const UPSTREAM_READ_LIMIT = 120;
/** The relay asks for this many items a page (src/workers/list-sweep.ts LIST_PAGE_LIMIT); the simulator's maximum too. */
const PAGE = 100;

export const LATENCY_CONFIG = {
  full: {
    tasks: 500,
    queuedMs: 1_000,
    processingMinMs: 19_000,
    processingMaxMs: 59_000,
    failureRate: 0.05,
    submitConcurrency: 16,
    drainMarginS: 180,
  },
  quick: {
    tasks: 30,
    queuedMs: 500,
    processingMinMs: 2_500,
    processingMaxMs: 6_500,
    failureRate: 0.05,
    submitConcurrency: 8,
    drainMarginS: 60,
  },
};

const IMAGE_PATH = "/openapi/v1/images/generations";
const VIDEO_PATH = "/openapi/v1/videos/generations";

function body(i, hookUrl) {
  const common = {
    prompt: `latency bench task ${i}: a lighthouse at dawn`,
    callback_url: hookUrl,
    metadata: { bench: "latency", n: String(i) },
  };
  return i % 2 === 0
    ? [IMAGE_PATH, { model: "p-image", mode: "generate", count: 1, ...common }]
    : [VIDEO_PATH, { model: "v-video", video_mode: "t2v", duration: 5, resolution: "480p", ...common }];
}

/**
 * The floor of completion→webhook latency for each list-body shape src/upstream/parse.ts reads, with
 * `tasks` in flight on one account and `perMinute` reads a minute: the time the reads of one full
 * pass over the tasks take when the whole budget is spent on it back to back. A task's completion
 * falls anywhere in a pass, so the floor is the max; p95 ≈ 0.95 × it and p50 ≈ half of it.
 */
export function latencyFloors(tasks, perMinute = READS_PER_MINUTE) {
  const perRead = 60 / perMinute;
  const row = (shape, reads, note) => ({ shape, reads_per_sweep: reads, floor_s: round(reads * perRead, 1), note });
  const pages = (size) => Math.ceil(tasks / size);
  return [
    row(
      "an item array at data | data.items | data.tasks | items | tasks, a cursor at next_cursor | data.next_cursor | cursor.next | next, limit=100 honoured, items with status and output (the simulator's {data:[…],next_cursor})",
      pages(PAGE),
      `each read brings ${PAGE} tasks' status and output, so ${pages(PAGE)} reads see all ${tasks} (the list newest first down to the oldest in flight; the relay now reads the active lists, then the terminal lists for output, which costs more)`,
    ),
    row(
      "the same, but the upstream caps a page at 20 (the simulator's default when limit is ignored)",
      pages(20),
      `${pages(20)} pages of 20`,
    ),
    row(
      "the same, but list items carry no output",
      pages(PAGE) + tasks,
      `${pages(PAGE)} reads find what ended, then one single read per finished task: ${tasks} completions need ${tasks} reads, so the budget, not the sweep, sets the latency (the first result after ~${round(pages(PAGE) * perRead, 1)} s, the last after ~${round((pages(PAGE) + tasks) * perRead)} s)`,
    ),
    row(
      "an item array but no cursor field the reader knows (first page only), or no item array (unrecognised body): single reads",
      tasks,
      "one single read per task in flight",
    ),
  ];
}

/** Most timestamps in any half-open window [t, t + windowMs). */
export function busiestWindow(times, windowMs = 60_000) {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  let bestAt = null;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i] - sorted[j] >= windowMs) j++;
    if (i - j + 1 > best) {
      best = i - j + 1;
      bestAt = sorted[j];
    }
  }
  return { reads: best, starts_at: bestAt };
}

/**
 * Reads grouped into bursts (gaps under gapMs): the relay sweeps the list endpoint page after page,
 * then waits; the bursts show how many reads a sweep takes and how far apart sweeps are.
 */
export function readBursts(times, gapMs = 400) {
  const sorted = [...times].sort((a, b) => a - b);
  const bursts = [];
  for (const t of sorted) {
    const last = bursts.at(-1);
    if (last && t - last.end < gapMs) {
      last.end = t;
      last.reads++;
    } else bursts.push({ start: t, end: t, reads: 1 });
  }
  const gaps = bursts.slice(1).map((b, i) => b.start - bursts[i].start);
  return {
    count: bursts.length,
    reads: distribution(bursts.map((b) => b.reads)),
    start_to_start_ms: distribution(gaps),
  };
}

/** A loopback webhook receiver: the first arrival of each task's terminal event, with the raw request kept for a signature check. */
function startReceiver() {
  const arrivals = new Map(); // upstream task id -> { at, type, status, relayCompletedAt, webhookId, raw }
  let count = 0;
  let duplicates = 0;
  let onArrival = () => {};
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const at = Date.now();
      res.writeHead(200, { "content-length": "0" });
      res.end();
      count++;
      const text = Buffer.concat(chunks).toString("utf8");
      try {
        const event = JSON.parse(text);
        const upstreamId = event.data?.upstream_task_id;
        if (!upstreamId) return;
        if (arrivals.has(upstreamId)) {
          duplicates++;
          return;
        }
        arrivals.set(upstreamId, {
          at,
          type: event.type,
          status: event.data.status,
          relayCompletedAt: event.data.completed_at ? Date.parse(event.data.completed_at) : NaN,
          raw: {
            body: text,
            headers: {
              "webhook-id": req.headers["webhook-id"],
              "webhook-timestamp": req.headers["webhook-timestamp"],
              "webhook-signature": req.headers["webhook-signature"],
            },
          },
        });
      } catch {
        // not a webhook body: ignored
      }
      onArrival();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/hooks/latency`,
        arrivals,
        stats: () => ({ requests: count, duplicates }),
        /** Resolves true once n tasks have a webhook, false after timeoutMs. */
        waitFor(n, timeoutMs) {
          return new Promise((done) => {
            const timer = setTimeout(() => {
              onArrival = () => {};
              done(arrivals.size >= n);
            }, timeoutMs);
            onArrival = () => {
              if (arrivals.size >= n) {
                clearTimeout(timer);
                onArrival = () => {};
                done(true);
              }
            };
            onArrival();
          });
        },
        close: () =>
          new Promise((r) => {
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}

/** POSTs every creation, `concurrency` at a time; returns per-task results. */
async function submitAll(relayUrl, apiKey, n, hookUrl, concurrency) {
  const results = new Array(n);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= n) return;
      const [path, payload] = body(i, hookUrl);
      const res = await fetch(`${relayUrl}${path}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${apiKey}`,
          "content-type": "application/json",
          "idempotency-key": `latency-${String(i).padStart(6, "0")}`,
        },
        body: JSON.stringify(payload),
      });
      const json = await res.json().catch(() => null);
      results[i] = { status: res.status, id: json?.data?.id ?? null, at: Date.now() };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

async function getJson(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url}: ${res.status} ${await res.text()}`);
  return (await res.json()).data;
}

/**
 * @param {{ quick?: boolean, tmp: string, track?: (child: any) => any, log?: (...a: string[]) => void, logLevel?: string }} opts
 */
export async function benchLatency({ quick = false, tmp, track = (c) => c, log = () => {}, logLevel = "info" }) {
  const cfg = quick ? LATENCY_CONFIG.quick : LATENCY_CONFIG.full;
  const maxTaskMs = cfg.queuedMs + cfg.processingMaxMs;
  log(
    `  ${cfg.tasks} tasks (half images, half videos), upstream durations ${(cfg.queuedMs + cfg.processingMinMs) / 1000}–${maxTaskMs / 1000} s, ${cfg.failureRate * 100}% failures, simulator limit ${UPSTREAM_READ_LIMIT} reads/min, relay budget ${READS_PER_MINUTE} reads/min; real time: about ${Math.round(maxTaskMs / 1000) + 15} s`,
  );
  const sim = track(
    await startSimulator(
      {
        SIM_READS_PER_MINUTE: UPSTREAM_READ_LIMIT,
        SIM_MAX_CONCURRENT: 100_000,
        SIM_IMAGE_QUEUED_MS: cfg.queuedMs,
        SIM_VIDEO_QUEUED_MS: cfg.queuedMs,
        SIM_IMAGE_PROCESSING_MS: cfg.processingMinMs,
        SIM_VIDEO_PROCESSING_MS: cfg.processingMinMs,
        SIM_IMAGE_PROCESSING_MAX_MS: cfg.processingMaxMs,
        SIM_VIDEO_PROCESSING_MAX_MS: cfg.processingMaxMs,
        SIM_FAILURE_RATE: cfg.failureRate,
        SIM_SEED: 15,
      },
      join(tmp, "sim-latency.log"),
    ),
  );
  const receiver = await startReceiver();
  let relay = null;
  try {
    const databasePath = join(tmp, "latency.db");
    const client = await createClient(databasePath, "latency");
    relay = track(
      await startRelay(
        {
          DATABASE_PATH: databasePath,
          UPSTREAM_BASE_URL: sim.url,
          UPSTREAM_API_KEY: "sandbox",
          UPSTREAM_READS_PER_MINUTE: READS_PER_MINUTE,
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
          LOG_LEVEL: logLevel,
        },
        join(tmp, "relay-latency.log"),
      ),
    );

    const t0 = Date.now();
    const submitted = await submitAll(relay.url, client.api_key, cfg.tasks, receiver.url, cfg.submitConcurrency);
    const accepted = submitted.filter((r) => r.status === 201).length;
    const submitS = (Date.now() - t0) / 1000;
    log(
      `  ${accepted}/${cfg.tasks} accepted in ${submitS.toFixed(1)} s; waiting for the webhooks (up to ${Math.round(maxTaskMs / 1000) + cfg.drainMarginS} s)`,
    );
    if (accepted < cfg.tasks) {
      const codes = {};
      for (const r of submitted) codes[r.status] = (codes[r.status] ?? 0) + 1;
      throw new Error(`only ${accepted} of ${cfg.tasks} creations accepted: ${JSON.stringify(codes)}`);
    }
    // Progress every 15 s, so a long real-time run shows it is alive.
    const progress = setInterval(
      () => log(`  [+${Math.round((Date.now() - t0) / 1000)} s] ${receiver.arrivals.size}/${accepted} webhooks`),
      quick ? 5_000 : 15_000,
    );
    const complete = await receiver.waitFor(accepted, maxTaskMs + cfg.drainMarginS * 1000);
    clearInterval(progress);
    const lastArrival = Math.max(...[...receiver.arrivals.values()].map((a) => a.at));
    // A few seconds more: any read the relay still makes after the last webhook counts too.
    await sleep(quick ? 1_000 : 3_000);

    const tasks = await getJson(`${sim.url}/_sim/tasks?api_key=sandbox`);
    const reads = await getJson(`${sim.url}/_sim/reads?api_key=sandbox`);
    await relay.stop();
    relay = null;

    const latencies = [];
    const detection = [];
    // Detection split at the first read (any page) the simulator received after the completion:
    // the wait for the next sweep, then what the sweep took until the relay recorded the end.
    const readTimes = [...reads.times].sort((a, b) => a - b);
    const firstReadAfter = (at) => {
      let lo = 0;
      let hi = readTimes.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (readTimes[mid] < at) lo = mid + 1;
        else hi = mid;
      }
      return lo < readTimes.length ? readTimes[lo] : null;
    };
    const waitForRead = [];
    const afterRead = [];
    const deliveryMs = [];
    const byOutcome = { succeeded: [], failed: [] };
    let missing = 0;
    let wrongStatus = 0;
    for (const t of tasks) {
      const a = receiver.arrivals.get(t.id);
      if (!a) {
        missing++;
        continue;
      }
      if (a.status !== t.outcome) wrongStatus++;
      const ms = a.at - t.completed_at_ms;
      latencies.push(ms);
      byOutcome[t.outcome]?.push(ms);
      if (Number.isFinite(a.relayCompletedAt)) {
        detection.push(a.relayCompletedAt - t.completed_at_ms);
        deliveryMs.push(a.at - a.relayCompletedAt);
        const read = firstReadAfter(t.completed_at_ms);
        if (read !== null && read <= a.relayCompletedAt) {
          waitForRead.push(read - t.completed_at_ms);
          afterRead.push(a.relayCompletedAt - read);
        }
      }
    }
    let signatureOk = true;
    try {
      const wh = new Webhook(client.webhook_secret);
      for (const a of receiver.arrivals.values()) wh.verify(a.raw.body, a.raw.headers);
    } catch {
      signatureOk = false;
    }

    const busiest = busiestWindow(reads.times);
    const busiestReads = Math.max(busiest.reads, reads.max_reads_in_any_minute);
    const budgetOk = busiestReads <= READS_PER_MINUTE && reads.rate_limited === 0;
    // Reads in each whole minute from the first creation (what "the busiest minute" looks like over time).
    const perMinute = [];
    for (const at of reads.times) {
      const m = Math.floor((at - t0) / 60_000);
      if (m >= 0) perMinute[m] = (perMinute[m] ?? 0) + 1;
    }
    const firstCompletion = Math.min(...tasks.map((t) => t.completed_at_ms));
    const lastCompletion = Math.max(...tasks.map((t) => t.completed_at_ms));
    const dist = distribution(latencies);
    const p95Ok = dist.p95 !== null && dist.p95 <= LATENCY_GOAL.p95Ms;
    const result = {
      method: `Real time, three processes on loopback: the simulator (dist/simulator/main.js; ${UPSTREAM_READ_LIMIT} reads/min per account enforced, durations ${cfg.queuedMs} ms queued + ${cfg.processingMinMs}–${cfg.processingMaxMs} ms processing drawn uniformly, ${cfg.failureRate * 100}% of tasks failing at random, seed 15), the relay (dist/main.js; UPSTREAM_READS_PER_MINUTE=${READS_PER_MINUTE}, temp SQLite, LOG_LEVEL=${logLevel}) and a node:http receiver in the bench process. ${cfg.tasks} creations (half p-image, half v-video t2v 5 s), ${cfg.submitConcurrency} at a time, all callback_url to the receiver. completion→webhook = arrival at the receiver − completed_at of the task in the simulator (GET /_sim/tasks); detection = the relay's data.completed_at − that; delivery = arrival − data.completed_at. Reads: the simulator's accepted task reads of the account (GET /_sim/reads); busiest = most reads in any 60 s window; the run fails if it exceeds ${READS_PER_MINUTE} or the simulator answered any 429.`,
      config: { ...cfg, reads_per_minute: READS_PER_MINUTE, upstream_read_limit: UPSTREAM_READ_LIMIT },
      tasks: cfg.tasks,
      accepted,
      delivered: receiver.arrivals.size,
      missing,
      wrong_status: wrongStatus,
      duplicate_webhooks: receiver.stats().duplicates,
      complete: complete && missing === 0,
      signature_verified: signatureOk,
      failed_tasks: tasks.filter((t) => t.outcome === "failed").length,
      submit_seconds: round(submitS, 1),
      completions_span_s: round((lastCompletion - firstCompletion) / 1000, 1),
      run_seconds: round((lastArrival - t0) / 1000, 1),
      completion_to_webhook_ms: dist,
      by_outcome_ms: { succeeded: distribution(byOutcome.succeeded), failed: distribution(byOutcome.failed) },
      detection_ms: distribution(detection),
      detection_split_ms: { wait_for_read: distribution(waitForRead), read_to_recorded: distribution(afterRead) },
      delivery_ms: distribution(deliveryMs),
      reads: {
        total: reads.task_reads,
        single: reads.single_reads,
        list: reads.list_reads,
        per_task: round(reads.task_reads / cfg.tasks, 2),
        rate_limited: reads.rate_limited,
        busiest_minute: busiestReads,
        busiest_minute_starts_s: busiest.starts_at === null ? null : round((busiest.starts_at - t0) / 1000, 1),
        per_minute_from_start: Array.from({ length: perMinute.length }, (_, i) => perMinute[i] ?? 0),
        budget: READS_PER_MINUTE,
        budget_ok: budgetOk,
        bursts: readBursts(reads.times),
      },
      floors: latencyFloors(cfg.tasks),
      goal: { p95_ms: LATENCY_GOAL.p95Ms, busiest_minute_max: READS_PER_MINUTE },
      met: budgetOk && p95Ok && complete,
    };
    log(
      `  ${result.delivered}/${cfg.tasks} webhooks (${result.failed_tasks} failed tasks); completion->webhook p50 ${dist.p50} ms, p95 ${dist.p95} ms, max ${dist.max} ms (detection p50 ${result.detection_ms.p50} / p95 ${result.detection_ms.p95} ms: the next read after p50 ${result.detection_split_ms.wait_for_read.p50} / p95 ${result.detection_split_ms.wait_for_read.p95}, then recorded after p50 ${result.detection_split_ms.read_to_recorded.p50} / p95 ${result.detection_split_ms.read_to_recorded.p95}; delivery p50 ${result.delivery_ms.p50} / p95 ${result.delivery_ms.p95} ms); ${result.reads.per_task} reads/task (${reads.list_reads} list + ${reads.single_reads} single); busiest minute ${busiestReads}/${READS_PER_MINUTE} reads; ${result.reads.bursts.count} read bursts of p50 ${result.reads.bursts.reads.p50} reads, p50 ${result.reads.bursts.start_to_start_ms.p50} ms apart${reads.rate_limited ? `, ${reads.rate_limited} answered 429` : ""}`,
    );
    if (!budgetOk)
      log(
        `  !! READ BUDGET EXCEEDED: ${busiestReads} reads in one 60 s window (budget ${READS_PER_MINUTE}), ${reads.rate_limited} x 429 rate_limit from the simulator`,
      );
    if (!result.complete) log(`  !! INCOMPLETE: ${missing} task(s) without a webhook`);
    return result;
  } finally {
    if (relay) await relay.stop();
    await receiver.close();
    await sim.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-latency-"));
  try {
    const result = await benchLatency({
      quick: process.env.BENCH_QUICK === "1",
      tmp,
      log: (...a) => console.log(...a),
    });
    console.log(JSON.stringify(result, null, 2));
    if (!result.reads.budget_ok) process.exitCode = 1;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

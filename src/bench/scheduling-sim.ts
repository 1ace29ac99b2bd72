/**
 * A fake-time simulation of the relay's polling against the simulator, in one process: the real
 * Relay (submitter + poller, SQLite in memory) reads the real simulator app through an in-memory
 * fetch, while a fake clock advances in steps. It measures what the read budget buys: reads per
 * finished task and the delay from upstream completion to the event being written, for the
 * adaptive scheduler and for naive one-read-per-task round-robin. Used by a test and `npm run bench`.
 * (It lives under src/bench, beside nothing it measures: the harness may import the whole relay and
 * the simulator, and nothing in the product imports it.)
 */
import type { Clock } from "../clock.js";
import { loadConfig } from "../config.js";
import { openDatabase } from "../db/sqlite/open.js";
import { sqliteStore } from "../open-store.js";
import { silentLogger } from "../logger.js";
import { Relay } from "../relay.js";
import { createClient } from "../services/clients.js";
import { createTask } from "../services/intake.js";
import type { PollStrategy } from "../core/poll-plan.js";
import { createSimulator } from "../simulator/app.js";
import type { SimulatorTimings } from "../simulator/options.js";

export interface SchedulingScenario {
  tasks: number;
  readsPerMinute: number;
  strategy: PollStrategy;
  /** Tasks arrive evenly over this span. */
  arrivalSpreadMs: number;
  /** Share of video tasks (the rest are images). */
  videoShare: number;
  timings: SimulatorTimings;
  stepMs?: number;
  /** Give up after this much simulated time. */
  maxSimMs?: number;
}

export interface SchedulingResult {
  strategy: PollStrategy;
  tasks: number;
  finished: number;
  reads: number;
  readsPerFinishedTask: number;
  /** Most task reads the relay made in any 60 s window. */
  maxReadsInAnyMinute: number;
  /** 429 rate_limit answers from the simulator (must be 0). */
  rateLimited: number;
  delaysMs: number[];
  p50Ms: number;
  p95Ms: number;
  simulatedMs: number;
}

class StepClock implements Clock {
  constructor(public t: number) {}
  now(): number {
    return this.t;
  }
}

const quantile = (sorted: number[], q: number) =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

/** Most timestamps that fall in any half-open window [t, t + windowMs). */
export function maxInWindow(times: number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let max = 0;
  let start = 0;
  for (let end = 0; end < sorted.length; end++) {
    while (sorted[end]! - sorted[start]! >= windowMs) start++;
    max = Math.max(max, end - start + 1);
  }
  return max;
}

export async function runSchedulingSimulation(s: SchedulingScenario): Promise<SchedulingResult> {
  const stepMs = s.stepMs ?? 250;
  const maxSimMs = s.maxSimMs ?? 60 * 60_000;
  const clock = new StepClock(Date.UTC(2026, 0, 1));
  const started = clock.t;
  const { app, state } = createSimulator({
    clock,
    accounts: [
      { apiKey: "sim-key", readsPerMinute: 120, maxConcurrent: s.tasks + 10, balance: Number.MAX_SAFE_INTEGER },
    ],
    timings: s.timings,
    publicBaseUrl: "http://simulator.local",
  });
  const reads: number[] = [];
  const fetchImpl: typeof fetch = async (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    if ((init?.method ?? "GET") === "GET" && /\/openapi\/v1\/tasks(\/|\?|$)/.test(url)) reads.push(clock.t);
    return app.request(url, init);
  };
  const database = openDatabase(":memory:");
  const config = loadConfig({
    DATABASE_PATH: ":memory:",
    UPSTREAM_BASE_URL: "http://simulator.local",
    UPSTREAM_API_KEY: "sim-key",
    UPSTREAM_READS_PER_MINUTE: String(s.readsPerMinute),
    LOG_LEVEL: "silent",
  });
  const store = sqliteStore(database);
  const relay = new Relay({
    config,
    store,
    clock,
    logger: silentLogger,
    upstream: { baseUrl: "http://simulator.local", apiKey: "sim-key" },
    fetch: fetchImpl,
    pollStrategy: s.strategy,
  });
  const { client } = await createClient({ store, clock }, { name: "sim" });
  const arrivals = Array.from(
    { length: s.tasks },
    (_, i) => started + Math.floor((i * s.arrivalSpreadMs) / Math.max(1, s.tasks)),
  );
  const videoEvery = s.videoShare > 0 ? Math.max(1, Math.round(1 / s.videoShare)) : Number.POSITIVE_INFINITY;
  let created = 0;
  const taskIds: string[] = [];
  const finishedCount = () =>
    (database.sqlite.prepare("SELECT count(*) AS n FROM tasks WHERE phase = 'done'").get() as { n: number }).n;

  while (clock.t - started < maxSimMs) {
    while (created < s.tasks && arrivals[created]! <= clock.t) {
      const video = created % videoEvery === 0;
      const body = video
        ? { model: "v-video", video_mode: "t2v", prompt: `simulated video ${created}`, duration: 5 }
        : { model: "flux-lite", mode: "generate", prompt: `simulated image ${created}`, count: 1 };
      taskIds.push(
        (
          await createTask(relay.deps, {
            client,
            type: video ? "video" : "image",
            body,
            idempotencyKey: `sim-task-${created}`,
          })
        ).task.id,
      );
      created++;
    }
    await relay.submitter.runOnce();
    await relay.poller.runOnce();
    if (created === s.tasks && finishedCount() === s.tasks) break;
    clock.t += stepMs;
  }

  const rows = database.sqlite
    .prepare(
      `SELECT t.upstream_task_id AS up, e.created_at AS event_at FROM tasks t
       JOIN events e ON e.task_id = t.id AND e.type IN ('task.succeeded', 'task.failed')`,
    )
    .all() as { up: string; event_at: number }[];
  const delays = rows.map((r) => r.event_at - state.taskById(r.up)!.completedAt).sort((a, b) => a - b);
  const finished = finishedCount();
  const result: SchedulingResult = {
    strategy: s.strategy,
    tasks: s.tasks,
    finished,
    reads: reads.length,
    readsPerFinishedTask: finished > 0 ? reads.length / finished : Number.NaN,
    maxReadsInAnyMinute: maxInWindow(reads, 60_000),
    rateLimited: state.stats().rate_limited,
    delaysMs: delays,
    p50Ms: quantile(delays, 0.5),
    p95Ms: quantile(delays, 0.95),
    simulatedMs: clock.t - started,
  };
  await relay.stop(100);
  database.close();
  return result;
}

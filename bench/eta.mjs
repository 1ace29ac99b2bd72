// estimated_completion_at (docs/contract.md, "When will it finish"): its error against the real end.
//
//   npm run build && node bench/eta.mjs [--tasks 2000] [--concurrency 4] [--seed 1]
//   BENCH_ONLY=eta npm run bench        (the same, as a row of the results)
//
// The upstream is the simulator's own state (SimulatorState, seeded, processing times drawn
// uniformly over a wide range), on a simulated clock. A relay-side loop plays the submitter (FIFO,
// within the account's concurrency) and the poller (learning each finished task's duration, the
// last 50 kept, as workers/duration-stats.ts), and every second estimates every waiting and running
// task with core/eta.ts, as the read service does. Each estimate is scored once the task ends:
// |estimate - real end| / (real end - time of the estimate). Median and p90 of that share, for
// waiting and running tasks apart and together.
import { fileURLToPath } from "node:url";
import { distImport } from "./lib/dist.mjs";

const STEP_MS = 100;
const OBSERVE_EVERY_MS = 1000;

export async function benchEta({ tasks: TASKS = 2000, concurrency: CONCURRENCY = 4, seed: SEED = 1 } = {}) {
  const { estimateCompletion, medianDuration } = await distImport("core/eta.js");
  const { SimulatorState } = await distImport("simulator/state.js");
  let now = Date.UTC(2026, 0, 1);
  const clock = { now: () => now };
  const sim = new SimulatorState({
    clock,
    accounts: [{ apiKey: "bench", maxConcurrent: CONCURRENCY, readsPerMinute: 0 }],
    timings: { imageQueuedMs: 500, imageProcessingMs: 2_000 },
    variation: { imageProcessingMaxMs: 14_000, seed: SEED },
  });
  const account = sim.findAccount("bench");
  const request = (i) => ({
    type: "image",
    model: "p-image",
    mode: "generate",
    prompt: `bench ${i}`,
    imageUrls: [],
    size: "1K",
    quality: "medium",
    aspectRatio: null,
  });

  // Arrivals a little faster than the account drains on average (mean duration ~8.5 s): a queue forms and drains.
  const meanMs = 500 + (2_000 + 14_000) / 2;
  const gapMs = (meanMs / CONCURRENCY) * 0.95;
  let seed = SEED * 7919;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };

  const waiting = []; // {i, arrivedAt}
  const running = new Map(); // sim id -> {i, submittedAt, sim}
  const samples = [];
  const estimates = new Map(); // i -> [{at, eta, phase}]
  const realEnd = new Map();
  let arrived = 0;
  let nextArrival = now;
  let nextObservation = now;

  while (realEnd.size < TASKS) {
    while (arrived < TASKS && nextArrival <= now) {
      waiting.push({ i: arrived++, arrivedAt: now });
      nextArrival += -Math.log(1 - rand()) * gapMs;
    }
    // Poller: ended tasks teach their duration (submission to end).
    for (const [id, r] of running) {
      if (r.sim.completedAt > now) continue;
      running.delete(id);
      realEnd.set(r.i, r.sim.completedAt);
      samples.push(r.sim.completedAt - r.submittedAt);
      if (samples.length > 50) samples.shift();
    }
    // Submitter: FIFO within the account's concurrency.
    while (waiting.length > 0 && running.size < CONCURRENCY) {
      const w = waiting.shift();
      const task = sim.create(account, `k${w.i}`, `f${w.i}`, request(w.i));
      running.set(task.id, { i: w.i, submittedAt: now, sim: task });
    }
    if (now >= nextObservation) {
      nextObservation += OBSERVE_EVERY_MS;
      const medianMs = medianDuration(samples);
      const note = (i, eta, phase) => {
        if (eta === null) return;
        const list = estimates.get(i) ?? [];
        list.push({ at: now, eta, phase });
        estimates.set(i, list);
      };
      for (const [ahead, w] of waiting.entries())
        note(
          w.i,
          estimateCompletion({ phase: "waiting", submittedAt: null, now, medianMs, ahead, capacity: CONCURRENCY }),
          "waiting",
        );
      for (const r of running.values())
        note(
          r.i,
          estimateCompletion({
            phase: "submitted",
            submittedAt: r.submittedAt,
            now,
            medianMs,
            ahead: null,
            capacity: CONCURRENCY,
          }),
          "running",
        );
    }
    now += STEP_MS;
  }

  const errors = { waiting: [], running: [], all: [] };
  for (const [i, list] of estimates) {
    const end = realEnd.get(i);
    for (const e of list) {
      const remaining = end - e.at;
      if (remaining <= 0) continue;
      const share = Math.abs(e.eta - end) / remaining;
      errors[e.phase].push(share);
      errors.all.push(share);
    }
  }
  const pct = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
  };
  const row = (name, xs) => ({
    estimates: name,
    n: xs.length,
    median_error_share: Math.round(pct(xs, 50) * 1000) / 1000,
    p90_error_share: Math.round(pct(xs, 90) * 1000) / 1000,
  });
  return {
    method: `${TASKS} tasks on the simulator's own state (SimulatorState, seeded ${SEED}) on a simulated clock: one upstream account at concurrency ${CONCURRENCY}, processing 2–14 s uniform (+0.5 s queued upstream), Poisson arrivals at 95% of the account's mean capacity (a queue forms and drains). A relay-side loop submits FIFO and learns each finished task's duration (the last 50, as workers/duration-stats.ts); every second every waiting and running task is estimated with core/eta.ts as the reads do, and each estimate is scored once its task ends: |estimate − real end| / (real end − time of the estimate).`,
    rows: [row("waiting", errors.waiting), row("running", errors.running), row("all", errors.all)],
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : fallback;
  };
  const result = await benchEta({
    tasks: arg("tasks", 2000),
    concurrency: arg("concurrency", 4),
    seed: arg("seed", 1),
  });
  console.log(result.method);
  console.table(result.rows);
}

// Poll scheduling under the read budget: the adaptive scheduler (list sweeps + targeted single
// reads) against naive one-read-per-task round-robin, for 50 and 500 tasks in flight, in fake time
// against the simulator (dist/bench/scheduling-sim.js). Reports reads per finished task and the
// delay from upstream completion to the relay writing the webhook event (delivery on loopback adds
// milliseconds, measured separately by the delivery benchmark).
import { pathToFileURL } from "node:url";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

export async function benchScheduling({ quick = false } = {}) {
  const { runSchedulingSimulation } = await import(
    pathToFileURL(join(root, "dist", "bench", "scheduling-sim.js")).href
  );
  const timings = { imageQueuedMs: 2_000, imageProcessingMs: 8_000, videoQueuedMs: 5_000, videoProcessingMs: 60_000 };
  const sizes = quick ? [10] : [50, 500];
  const rows = [];
  for (const tasks of sizes) {
    for (const strategy of ["adaptive", "round-robin"]) {
      const r = await runSchedulingSimulation({
        tasks,
        readsPerMinute: 100,
        strategy,
        arrivalSpreadMs: 5_000,
        videoShare: 0.5,
        timings,
      });
      rows.push({
        in_flight: tasks,
        strategy,
        finished: r.finished,
        reads_per_finished_task: Number(r.readsPerFinishedTask.toFixed(2)),
        max_reads_in_any_minute: r.maxReadsInAnyMinute,
        rate_limited: r.rateLimited,
        p50_completion_to_event_ms: r.p50Ms,
        p95_completion_to_event_ms: r.p95Ms,
      });
    }
  }
  const ratios = {};
  for (const tasks of sizes) {
    const a = rows.find((r) => r.in_flight === tasks && r.strategy === "adaptive");
    const n = rows.find((r) => r.in_flight === tasks && r.strategy === "round-robin");
    ratios[`p50_round_robin_over_adaptive_${tasks}`] = Number(
      (n.p50_completion_to_event_ms / Math.max(1, a.p50_completion_to_event_ms)).toFixed(1),
    );
  }
  return { scenario: { reads_per_minute: 100, arrival_spread_ms: 5_000, video_share: 0.5, timings }, rows, ratios };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const result = await benchScheduling({ quick: process.env.BENCH_QUICK === "1" });
  console.table(result.rows);
  console.log(result.ratios);
}

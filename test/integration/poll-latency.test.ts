import { describe, expect, it } from "vitest";
import { maxInWindow } from "../../src/bench/scheduling-sim.js";
import { loadConfig } from "../../src/config.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { silentLogger } from "../../src/logger.js";
import { sqliteStore } from "../../src/open-store.js";
import { Relay } from "../../src/relay.js";
import { createClient } from "../../src/services/clients.js";
import { createTask } from "../../src/services/intake.js";
import { createSimulator } from "../../src/simulator/app.js";

/**
 * Completion → event at the read budget, in fake time: a smaller twin of bench/latency.mjs (issue
 * #32, deliverable 6). 300 tasks submitted within 3 s, half images and half videos, 1 s queued then
 * 19–39 s processing drawn from a seeded range, 5% failing, 100 reads a minute. Nothing can end in
 * the first 20 s: the poller spends that quiet spell on one-page probes rather than full sweeps, and
 * the reads it kept go to the completions (poll-plan.ts, PROBE_READS and sweepInterval). Before,
 * it swept at the budget's full pace from the start (35 reads by 20 s) and the last sweeps of the
 * batch waited for the window: p95 1.79 s here.
 */
describe("poll latency at the read budget (fake time)", () => {
  it("300 tasks ending over 20 s: few reads while none can end, p95 completion → event under 1.5 s, within 100 reads in any minute", async () => {
    const clock = {
      t: Date.UTC(2026, 0, 1),
      now() {
        return this.t;
      },
    };
    const started = clock.t;
    const { app, state } = createSimulator({
      clock,
      accounts: [{ apiKey: "sim-key", readsPerMinute: 120, maxConcurrent: 100_000, balance: Number.MAX_SAFE_INTEGER }],
      timings: { imageQueuedMs: 1_000, videoQueuedMs: 1_000, imageProcessingMs: 19_000, videoProcessingMs: 19_000 },
      variation: { imageProcessingMaxMs: 39_000, videoProcessingMaxMs: 39_000, failureRate: 0.05, seed: 15 },
      publicBaseUrl: "http://simulator.local",
    });
    const reads: number[] = [];
    const fetchImpl: typeof fetch = async (input, init) => {
      const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
      if ((init?.method ?? "GET") === "GET" && /\/openapi\/v1\/tasks(\/|\?|$)/.test(url)) reads.push(clock.t);
      return app.request(url, init);
    };
    const database = openDatabase(":memory:");
    const store = sqliteStore(database);
    const relay = new Relay({
      config: loadConfig({
        DATABASE_PATH: ":memory:",
        UPSTREAM_BASE_URL: "http://simulator.local",
        UPSTREAM_API_KEY: "sim-key",
        UPSTREAM_READS_PER_MINUTE: "100",
        LOG_LEVEL: "silent",
      }),
      store,
      clock,
      logger: silentLogger,
      upstream: { baseUrl: "http://simulator.local", apiKey: "sim-key" },
      fetch: fetchImpl,
    });
    try {
      const { client } = await createClient({ store, clock }, { name: "latency" });
      const TASKS = 300;
      const done = () =>
        (database.sqlite.prepare("SELECT count(*) AS n FROM tasks WHERE phase = 'done'").get() as { n: number }).n;
      let created = 0;
      while (clock.t - started < 300_000) {
        while (created < TASKS && started + Math.floor((created * 3_000) / TASKS) <= clock.t) {
          const video = created % 2 === 1;
          await createTask(relay.deps, {
            client,
            type: video ? "video" : "image",
            body: video
              ? {
                  model: "v-video",
                  video_mode: "t2v",
                  prompt: `video task ${created}`,
                  duration: 5,
                  resolution: "480p",
                }
              : { model: "p-image", mode: "generate", prompt: `image task ${created}`, count: 1 },
            idempotencyKey: `latency-task-${created}`,
          });
          created++;
        }
        await relay.submitter.runOnce();
        await relay.poller.runOnce();
        if (created === TASKS && done() === TASKS) break;
        clock.t += 50;
      }
      expect(done()).toBe(TASKS);
      const rows = database.sqlite
        .prepare(
          "SELECT t.upstream_task_id AS up, e.created_at AS at FROM tasks t JOIN events e ON e.task_id = t.id AND e.type IN ('task.succeeded', 'task.failed')",
        )
        .all() as { up: string; at: number }[];
      expect(rows).toHaveLength(TASKS);
      const delays = rows.map((r) => r.at - state.taskById(r.up)!.completedAt).sort((a, b) => a - b);
      const p95 = delays[Math.floor(0.95 * delays.length)]!;
      expect(p95).toBeLessThan(1_500);
      // While nothing could end (the first completion comes 20 s after the first creation): probes.
      const firstEnd = Math.min(...rows.map((r) => state.taskById(r.up)!.completedAt));
      expect(firstEnd - started).toBeGreaterThanOrEqual(20_000);
      expect(reads.filter((t) => t < firstEnd).length).toBeLessThanOrEqual(20);
      expect(maxInWindow(reads, 60_000)).toBeLessThanOrEqual(100);
      expect(state.stats().rate_limited).toBe(0);
    } finally {
      await relay.stop(100);
      database.close();
    }
  }, 120_000);
});

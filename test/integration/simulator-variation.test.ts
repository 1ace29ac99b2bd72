import { describe, expect, it } from "vitest";
import { FakeClock } from "../helpers/fake-clock.js";
import { createSimulator } from "../../src/simulator/app.js";
import { parseSimulatorEnv } from "../../src/simulator/config.js";
import type { SimulatorVariation } from "../../src/simulator/options.js";

// The simulator's optional spread (duration range, random failures) and the admin routes a
// real-time benchmark reads (/_sim/tasks, /_sim/reads). The defaults are covered by simulator*.test.ts.
const auth = { authorization: "Bearer sandbox" };
const IMAGE = "/openapi/v1/images/generations";

function setup(variation?: SimulatorVariation) {
  const clock = new FakeClock(Date.parse("2026-01-01T00:00:00Z"));
  const { app } = createSimulator({
    clock,
    accounts: [{ apiKey: "sandbox", maxConcurrent: 1_000, readsPerMinute: 5 }],
    timings: { imageQueuedMs: 1_000, imageProcessingMs: 10_000 },
    ...(variation ? { variation } : {}),
  });
  let n = 0;
  const create = async () => {
    const res = await app.request(IMAGE, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", "idempotency-key": `variation-${n++}` },
      body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a lighthouse", count: 1 }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  };
  const timelines = async () =>
    (
      (await (await app.request("/_sim/tasks?api_key=sandbox")).json()) as {
        data: {
          id: string;
          outcome: string;
          created_at_ms: number;
          processing_at_ms: number;
          completed_at_ms: number;
        }[];
      }
    ).data;
  return { app, clock, create, timelines };
}

describe("simulator variation", () => {
  it("is off by default: every task takes exactly its timings and succeeds", async () => {
    const { create, timelines } = setup();
    for (let i = 0; i < 20; i++) await create();
    for (const t of await timelines()) {
      expect(t.completed_at_ms - t.created_at_ms).toBe(11_000);
      expect(t.outcome).toBe("succeeded");
    }
  });

  it("draws processing times from the range and fails about the given share, the same for the same seed", async () => {
    const run = async () => {
      const { create, timelines, app, clock } = setup({ imageProcessingMaxMs: 50_000, failureRate: 0.2, seed: 7 });
      for (let i = 0; i < 200; i++) await create();
      const tasks = await timelines();
      clock.advance(60_000);
      const failedId = tasks.find((t) => t.outcome === "failed")!.id;
      const read = (await (await app.request(`/openapi/v1/tasks/${failedId}`, { headers: auth })).json()) as {
        data: { status: string; error: { message: string } };
      };
      expect(read.data.status).toBe("failed");
      expect(read.data.error.message).toContain("failure rate");
      return tasks;
    };
    const tasks = await run();
    const processing = tasks.map((t) => t.completed_at_ms - t.processing_at_ms);
    expect(Math.min(...processing)).toBeGreaterThanOrEqual(10_000);
    expect(Math.max(...processing)).toBeLessThanOrEqual(50_000);
    expect(new Set(processing).size).toBeGreaterThan(100);
    const failed = tasks.filter((t) => t.outcome === "failed").length;
    expect(failed).toBeGreaterThan(20);
    expect(failed).toBeLessThan(60);
    expect((await run()).map((t) => [t.completed_at_ms - t.created_at_ms, t.outcome])).toEqual(
      tasks.map((t) => [t.completed_at_ms - t.created_at_ms, t.outcome]),
    );
  });

  it("reads the variation from the environment only when set", () => {
    const parsed = parseSimulatorEnv({
      SIM_IMAGE_PROCESSING_MAX_MS: "60000",
      SIM_VIDEO_PROCESSING_MAX_MS: "90000",
      SIM_FAILURE_RATE: "0.05",
      SIM_SEED: "15",
    });
    expect(parsed.ok && parsed.settings.options.variation).toEqual({
      imageProcessingMaxMs: 60_000,
      videoProcessingMaxMs: 90_000,
      failureRate: 0.05,
      seed: 15,
    });
    const plain = parseSimulatorEnv({});
    expect(plain.ok && "variation" in plain.settings.options).toBe(false);
    for (const bad of ["5%", "1.5", "-0.1", "abc"]) {
      const p = parseSimulatorEnv({ SIM_FAILURE_RATE: bad });
      expect(p.ok).toBe(false);
      if (!p.ok) expect(p.error).toMatch(/SIM_FAILURE_RATE: must be a number from 0 to 1/);
    }
  });
});

describe("admin routes for benchmarks", () => {
  it("/_sim/reads counts single and list reads, refused ones apart, and the busiest minute", async () => {
    const { app, clock, create } = setup();
    const id = await create();
    for (let i = 0; i < 3; i++) {
      expect((await app.request(`/openapi/v1/tasks/${id}`, { headers: auth })).status).toBe(200);
      clock.advance(1_000);
    }
    expect((await app.request("/openapi/v1/tasks?limit=100&status=processing", { headers: auth })).status).toBe(200);
    expect((await app.request("/openapi/v1/tasks", { headers: auth })).status).toBe(200);
    expect((await app.request(`/openapi/v1/tasks/${id}`, { headers: auth })).status).toBe(429); // 5 a minute
    clock.advance(60_000);
    expect((await app.request(`/openapi/v1/tasks/${id}`, { headers: auth })).status).toBe(200);
    const reads = (
      (await (await app.request("/_sim/reads?api_key=sandbox")).json()) as { data: Record<string, unknown> }
    ).data;
    expect(reads).toMatchObject({
      task_reads: 6,
      single_reads: 4,
      list_reads: 2,
      rate_limited: 1,
      max_reads_in_any_minute: 5,
      dropped: 0,
    });
    expect(reads.times).toHaveLength(6);
  });

  it("/_sim/tasks lists each task's instants in creation order", async () => {
    const { clock, create, timelines, app } = setup();
    const a = await create();
    clock.advance(500);
    const b = await create();
    const tasks = await timelines();
    expect(tasks.map((t) => t.id)).toEqual([a, b]);
    expect(tasks[1]).toMatchObject({
      outcome: "succeeded",
      processing_at_ms: tasks[1]!.created_at_ms + 1_000,
      completed_at_ms: tasks[1]!.created_at_ms + 11_000,
    });
    expect(tasks[1]!.created_at_ms - tasks[0]!.created_at_ms).toBe(500);
    expect((await app.request("/_sim/tasks")).status).toBe(400);
    expect((await app.request("/_sim/reads?api_key=nobody")).status).toBe(404);
  });
});

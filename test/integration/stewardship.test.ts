import { upstreamSuite } from "../helpers/upstream-suite.js";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createTask as createTaskService } from "../../src/services/intake.js";
import { maxInWindow, runSchedulingSimulation } from "../../src/bench/scheduling-sim.js";
import { createTask, readTask, taskRow } from "../helpers/flow.js";
import { imageBody, UPSTREAM_KEY, insertTestClient } from "../helpers/relay.js";

const { setup } = upstreamSuite({});

describe("read-budget-aware polling (fake-time simulation against the simulator)", () => {
  const timings = { imageQueuedMs: 2_000, imageProcessingMs: 8_000, videoQueuedMs: 5_000, videoProcessingMs: 60_000 };

  it("500 in flight, 100 reads/min: budget never exceeded, completion→event in seconds, far below round-robin", async () => {
    const scenario = { tasks: 500, readsPerMinute: 100, arrivalSpreadMs: 5_000, videoShare: 0.5, timings };
    const adaptive = await runSchedulingSimulation({ ...scenario, strategy: "adaptive" });
    const naive = await runSchedulingSimulation({ ...scenario, strategy: "round-robin" });
    for (const run of [adaptive, naive]) {
      expect(run.finished).toBe(500);
      expect(run.maxReadsInAnyMinute).toBeLessThanOrEqual(100);
      expect(run.rateLimited).toBe(0);
    }
    expect(adaptive.p50Ms).toBeLessThanOrEqual(5_000);
    expect(naive.p50Ms / adaptive.p50Ms).toBeGreaterThanOrEqual(10);
    expect(adaptive.readsPerFinishedTask).toBeLessThan(naive.readsPerFinishedTask);
  }, 120_000);

  it("maxInWindow counts the most events in any window", () => {
    expect(maxInWindow([0, 10, 59_999, 60_000, 120_000], 60_000)).toBe(3);
    expect(maxInWindow([0, 10, 59_999, 60_000, 60_001], 60_000)).toBe(4);
    expect(maxInWindow([], 60_000)).toBe(0);
  });
});

describe("list sweeps", () => {
  it("learns many tasks' states from list pages instead of one read each", async () => {
    const { t, up } = setup();
    const client = t.client();
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await createTask(t, client.apiKey));
    await t.relay.submitter.runOnce();
    await t.relay.submitter.runOnce();
    up.finishAll("succeeded");
    for (const task of up.tasks.values()) task.output = { images: [{ url: `https://cdn.test/${task.id}.png` }] };
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    for (const id of ids) expect(taskRow(t, id).status).toBe("succeeded");
    const single = up.reads.filter((r) => r.id !== "(list)");
    expect(single).toHaveLength(0);
    expect(up.reads.length).toBeLessThanOrEqual(4);
    const view = await readTask(t, client.apiKey, ids[0]!);
    expect(view.output).toEqual({ images: [{ url: `https://cdn.test/${up.taskOf(ids[0]!)!.id}.png` }] });
  });

  /** Submits `n` tasks; returns relay id → upstream id. */
  async function inFlight(
    t: ReturnType<typeof setup>["t"],
    up: ReturnType<typeof setup>["up"],
    apiKey: string,
    n: number,
  ) {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push(await createTask(t, apiKey));
    for (let i = 0; i < 30 && ids.some((id) => taskRow(t, id).phase === "waiting"); i++)
      await t.relay.submitter.runOnce();
    for (const task of up.tasks.values()) task.status = "processing";
    return ids.map((id) => ({ id, up: up.taskOf(id)! }));
  }
  const finish = (tasks: Array<{ up: { status: string; output?: unknown; id: string } }>) => {
    for (const { up: task } of tasks) {
      task.status = "succeeded";
      task.output = { images: [{ url: `https://cdn.test/${task.id}.png` }] };
    }
  };
  /** One poller tick after the next sweep is due; returns the list reads it made. */
  async function sweepOnce(t: ReturnType<typeof setup>["t"], up: ReturnType<typeof setup>["up"]) {
    t.clock.advance(10_000);
    const before = up.reads.length;
    await t.relay.poller.runOnce();
    return up.reads.slice(before);
  }

  it("while tasks keep ending, one pass over the unfiltered list replaces the active and terminal lists", async () => {
    const { t, up } = setup();
    const client = t.client();
    const tasks = await inFlight(t, up, client.apiKey, 150);
    const settledWithOutput = async (ended: typeof tasks) => {
      for (const { id, up: task } of ended) {
        expect(taskRow(t, id).status).toBe("succeeded");
        expect((await readTask(t, client.apiKey, id)).output).toEqual({
          images: [{ url: `https://cdn.test/${task.id}.png` }],
        });
      }
    };
    // First sweep (nothing seen ending yet): the unfiltered list down to the oldest task in flight
    // (2 pages of 100 for 150 tasks) settles the 10 that ended, with their output.
    const first = tasks.filter((_, i) => i % 15 === 0);
    finish(first);
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null, null]);
    await settledWithOutput(first);
    // Tasks keep ending: the active lists with the succeeded list are measured once (the processing
    // list: 2 pages; the relay knows none queued any more)...
    const second = tasks.filter((_, i) => i % 15 === 3);
    finish(second);
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual(["processing", "processing", "succeeded"]);
    await settledWithOutput(second);
    // ...and cost more than the unfiltered pass: from then on, while tasks end, that pass alone
    // settles what ended with its output, without a terminal list or a single read.
    const third = tasks.filter((_, i) => i % 15 === 7);
    finish(third);
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null, null]);
    await settledWithOutput(third);
    // Nothing ends: one more full pass finds so, then a probe (one page, from where the pass found
    // the oldest task in flight) stands in for the next, and the full pass comes again within 15 s.
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null, null]);
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null]);
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null, null]);
    expect(up.reads.filter((r) => r.id !== "(list)")).toHaveLength(0);
    for (const [i, { id }] of tasks.entries())
      expect(taskRow(t, id).status).toBe([0, 3, 7].includes(i % 15) ? "succeeded" : "processing");
  });

  it("an unfiltered list that leaves out a task of ours is not used again; nothing is missed", async () => {
    const { t, up } = setup();
    const client = t.client();
    const tasks = await inFlight(t, up, client.apiKey, 40);
    up.hiddenUnfiltered.add(tasks[30]!.up.id);
    finish(tasks.slice(0, 5));
    // The first sweep reads the unfiltered list, which ends without task 30 (still running): the
    // ended tasks it showed are settled all the same.
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual([null]);
    for (const { id } of tasks.slice(0, 5)) expect(taskRow(t, id).status).toBe("succeeded");
    finish(tasks.slice(5, 10));
    // From then on the active lists (queued too: task 30 was not seen running), though tasks keep ending.
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual(["queued", "processing", "succeeded"]);
    finish(tasks.slice(10, 15));
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual(["processing", "succeeded"]);
    finish(tasks.slice(15, 20));
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual(["processing", "succeeded"]);
    // Nothing ends: no probe either (it would read the unfiltered list), the active list alone.
    expect((await sweepOnce(t, up)).map((r) => r.status)).toEqual(["processing"]);
    expect(up.reads.filter((r) => r.id !== "(list)")).toHaveLength(0);
    for (const [i, { id }] of tasks.entries()) expect(taskRow(t, id).status).toBe(i < 20 ? "succeeded" : "processing");
  });

  it("sweeps spend the whole budget once tasks are due, and half of it while none can have ended yet", async () => {
    /** List reads over 60 s of fake time in 250 ms steps, 20 image tasks in flight, 20 reads a minute. */
    async function listReads(learnedMs: number | null): Promise<number> {
      const { t, up } = setup({ UPSTREAM_READS_PER_MINUTE: "20" });
      if (learnedMs !== null)
        await t.store.accounts.saveDurationSamples(
          "image",
          "p-image",
          [learnedMs, learnedMs, learnedMs],
          t.clock.now(),
        );
      await inFlight(t, up, t.client().apiKey, 20);
      const before = up.reads.length;
      for (let i = 0; i < 240; i++) {
        t.clock.advance(250);
        await t.relay.poller.runOnce();
      }
      expect(up.reads.slice(before).every((r) => r.id === "(list)")).toBe(true);
      return up.reads.length - before;
    }
    // Nothing learned: every task counts as due, and sweeps (one read each once the relay knows
    // them processing) are paced to the whole budget: about 20 reads in the minute.
    const due = await listReads(null);
    // The kind takes 10 minutes: none of the 20 can have ended yet, so half the budget.
    const idle = await listReads(600_000);
    expect(due).toBeGreaterThanOrEqual(18);
    expect(due).toBeLessThanOrEqual(20);
    expect(idle).toBeGreaterThanOrEqual(9);
    expect(idle).toBeLessThanOrEqual(12);
  });

  it("an unrecognised list body falls back to single reads", async () => {
    const { t, up } = setup();
    up.listSupported = false;
    const client = t.client();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await createTask(t, client.apiKey));
    await t.relay.submitter.runOnce();
    up.finishAll("succeeded");
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    for (const id of ids) expect(taskRow(t, id).status).toBe("succeeded");
    expect(up.reads.filter((r) => r.id === "(list)")).toHaveLength(1);
    expect(up.reads.filter((r) => r.id !== "(list)")).toHaveLength(5);
  });
});

describe("fair admission", () => {
  it("client A floods 1,000 tasks, client B then submits 10: B goes upstream within the first free slots", async () => {
    const { t, up } = setup({ UPSTREAM_MAX_CONCURRENT: "4" });
    const a = insertTestClient(t.database.db, t.clock, { name: "flood" }).client;
    const b = insertTestClient(t.database.db, t.clock, { name: "small" }).client;
    const deps = t.relay.deps;
    for (let i = 0; i < 1_000; i++)
      await createTaskService(deps, { client: a, type: "image", body: imageBody(), idempotencyKey: `flood-${i}-key` });
    const bIds: string[] = [];
    for (let i = 0; i < 10; i++)
      bIds.push(
        (
          await createTaskService(deps, {
            client: b,
            type: "image",
            body: imageBody(),
            idempotencyKey: `small-${i}-key`,
          })
        ).task.id,
      );

    // Run slots: submit, then finish what runs, until B's ten are all upstream.
    const submittedOrder: string[] = [];
    for (let round = 0; round < 50 && bIds.some((id) => taskRow(t, id).phase === "waiting"); round++) {
      const before = up.creates.length;
      await t.relay.submitter.runOnce();
      for (const call of up.creates.slice(before)) submittedOrder.push(call.key!.slice("genrelay-".length));
      up.finishAll("succeeded");
      t.clock.advance(3_000);
      await t.relay.poller.runOnce();
    }
    const positions = bIds.map((id) => submittedOrder.indexOf(id));
    expect(positions.every((p) => p >= 0)).toBe(true);
    // Alternating with A: B's tenth task is among the first ~20 submissions, not after 1,000.
    expect(Math.max(...positions)).toBeLessThan(24);
  }, 60_000);
});

describe("per-client limits and accounts", () => {
  it("a credit limit refuses new tasks with 402 insufficient_points once spent; nothing reaches the upstream", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client("capped", { creditLimit: 40 });
    await createTask(t, apiKey);
    await createTask(t, apiKey);
    // The price is not known yet: the first task takes the whole room and the second waits for its charge.
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(1);
    // The charge is known once a read shows usage (20 credits here), and with it the price: the second fits.
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(2);
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    const res = await t.request(apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: imageBody(),
      idempotencyKey: "over-the-limit",
    });
    expect(res.status).toBe(402);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("insufficient_points");
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(2);
    const usage = (await (await t.request(apiKey, "/openapi/v1/usage")).json()) as {
      data: { points_spent: number; credit_limit: number };
    };
    expect(usage.data).toMatchObject({ points_spent: 40, credit_limit: 40 });
  });

  it("a waiting-queue cap answers 429 concurrent_limit at intake; the refused task never exists", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client("queue-capped", { maxWaiting: 2 });
    await createTask(t, apiKey);
    await createTask(t, apiKey);
    const res = await t.request(apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: imageBody(),
      idempotencyKey: "third-task-key",
    });
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("5");
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("concurrent_limit");
    await t.relay.submitter.runOnce();
    expect(up.creates).toHaveLength(2);
    const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] };
    expect(list.data).toHaveLength(2);
  });

  it("a client's own upstream key is stored encrypted and used for its tasks, with a budget of its own", async () => {
    const encryptionKey = randomBytes(32).toString("base64");
    const { t, up } = setup({ RELAY_ENCRYPTION_KEY: encryptionKey });
    const own = insertTestClient(t.database.db, t.clock, {
      name: "own-key",
      upstreamKey: "client-own-upstream-key",
      encryptionKey: t.config.encryptionKey,
    });
    expect(own.client.upstreamKeyEncrypted).not.toContain("client-own-upstream-key");
    expect(own.client.upstreamAccount).toBe(own.client.id);
    const shared = t.client("shared");
    await createTask(t, own.apiKey);
    await createTask(t, shared.apiKey);
    await t.relay.submitter.runOnce();
    expect(up.creates.map((c) => c.auth).sort()).toEqual(
      [`Bearer ${UPSTREAM_KEY}`, "Bearer client-own-upstream-key"].sort(),
    );
    expect(t.relay.budget.used(own.client.id)).toBe(0);
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    expect(t.relay.budget.used(own.client.id)).toBe(1);
    expect(t.relay.budget.used("default")).toBe(1);
  });

  it("a waiting task shows its queue position", async () => {
    const { t } = setup({ UPSTREAM_MAX_CONCURRENT: "1" });
    const { apiKey } = t.client();
    const ids = [await createTask(t, apiKey), await createTask(t, apiKey), await createTask(t, apiKey)];
    await t.relay.submitter.runOnce();
    expect((await readTask(t, apiKey, ids[0]!)).data.queue_position).toBeUndefined();
    expect((await readTask(t, apiKey, ids[1]!)).data.queue_position).toBe(1);
    expect((await readTask(t, apiKey, ids[2]!)).data.queue_position).toBe(2);
  });
});

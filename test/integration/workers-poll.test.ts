import { upstreamSuite } from "../helpers/upstream-suite.js";
import { HttpResponse } from "msw";
import { describe, expect, it } from "vitest";
import { type FakeUpstream, upstreamError } from "../helpers/fake-upstream.js";
import { createTask, readTask, storedTask } from "../helpers/flow.js";
import { verifyAt } from "../helpers/receiver.js";
import type { DialectRelay } from "../helpers/relay.js";
import { maxInWindow } from "../../src/bench/scheduling-sim.js";

const { dialects, receiver } = upstreamSuite();

/** Creates tasks and submits them all upstream; returns relay task id → upstream task id. */
async function submitted(
  t: DialectRelay,
  up: FakeUpstream,
  apiKey: string,
  bodies: Array<Record<string, unknown>>,
): Promise<Array<{ id: string; up: string }>> {
  const ids: string[] = [];
  for (const extra of bodies) ids.push(await createTask(t, apiKey, extra));
  for (
    let i = 0;
    i < 20 && (await Promise.all(ids.map((id) => storedTask(t, id)))).some((row) => row.phase === "waiting");
    i++
  )
    await t.relay.submitter.runOnce();
  return ids.map((id) => ({ id, up: up.taskOf(id)!.id }));
}

describe.each(dialects)("on %s", (_dialect, setup) => {
  describe("poller: what a read shows", () => {
    it("processing: a task.processing event only for a task subscribed to it", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const [sub, plain] = await submitted(t, up, client.apiKey, [
        { callback_url: r.url("/sub"), callback_events: ["task.processing", "task.succeeded"], metadata: { k: "v" } },
        { callback_url: r.url("/plain") },
      ]);
      up.set(sub!.up, { status: "processing" });
      up.set(plain!.up, { status: "processing" });

      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
      expect(up.reads.map((x) => x.id).sort()).toEqual([sub!.up, plain!.up].sort());
      expect((await readTask(t, client.apiKey, sub!.id)).data.status).toBe("processing");
      expect((await readTask(t, client.apiKey, plain!.id)).data.status).toBe("processing");

      await t.relay.dispatcher.runOnce();
      expect(r.requests.map((x) => x.url)).toEqual(["/sub"]);
      expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
        type: "task.processing",
        data: {
          id: sub!.id,
          status: "processing",
          previous_status: "queued",
          sequence: 1,
          metadata: { k: "v" },
          output: null,
        },
      });

      // Still processing on the next read: no new event.
      t.clock.advance(5_000);
      await t.relay.poller.runOnce();
      await t.relay.dispatcher.runOnce();
      expect(up.reads.length).toBe(4);
      expect(r.requests).toHaveLength(1);
    });

    it("succeeded: output verbatim, usage, completed_at, and task.succeeded carries them", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{ callback_url: r.url(), metadata: { order: "1234" } }]);
      const output = {
        images: [{ url: "https://cdn.test/a.png", width: 1024, seed: 42 }],
        "odd-key": { nested: [1, null, "x", { deep: true }], unicode: "é✓" },
        empty: [],
      };
      up.set(task!.up, { status: "succeeded", output, usage: { points_charged: 70, points_refunded: 0 } });

      t.clock.advance(2_000);
      await t.relay.poller.runOnce();

      const view = await readTask(t, client.apiKey, task!.id);
      expect(view.output).toEqual(output);
      expect(view.usage).toEqual({ points_charged: 70, points_refunded: 0 });
      expect(view.data).toMatchObject({
        status: "succeeded",
        error: null,
        completed_at: new Date(t.clock.now()).toISOString(),
      });
      expect(await storedTask(t, task!.id)).toMatchObject({ phase: "done", nextRunAt: null });

      await t.relay.dispatcher.runOnce();
      const body = verifyAt(client.secret, r.requests[0]!, t.clock.now()) as { data: Record<string, unknown> };
      expect(body).toMatchObject({
        type: "task.succeeded",
        data: { id: task!.id, status: "succeeded", previous_status: "queued", metadata: { order: "1234" } },
      });
      expect(body.data.output).toEqual(output);
      expect(body.data.usage).toEqual({ points_charged: 70, points_refunded: 0 });

      // A finished task is never read again.
      t.clock.advance(10 * 60_000);
      await t.relay.poller.runOnce();
      expect(up.reads).toHaveLength(1);
    });

    it("reads tolerantly: a flat body with status 'completed' and top-level usage", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{}]);
      up.nextRead.push((call) =>
        HttpResponse.json({
          id: call.id,
          status: "completed",
          output: { video: "https://cdn.test/v.mp4" },
          usage: { points_charged: 500 },
        }),
      );
      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
      const view = await readTask(t, client.apiKey, task!.id);
      expect(view).toMatchObject({
        data: { status: "succeeded" },
        output: { video: "https://cdn.test/v.mp4" },
        usage: { points_charged: 500, points_refunded: null },
      });
    });

    it("failed: refund and the upstream error are kept, task.failed delivered", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{ callback_url: r.url() }]);
      const error = { code: "content_policy_violation", message: "The prompt was refused.", request_id: "req_gen_9" };
      up.set(task!.up, { status: "failed", usage: { points_charged: 40, points_refunded: 40 }, error });

      t.clock.advance(2_000);
      await t.relay.poller.runOnce();

      const view = await readTask(t, client.apiKey, task!.id);
      expect(view.data).toMatchObject({ status: "failed", error });
      expect(view.usage).toEqual({ points_charged: 40, points_refunded: 40 });
      expect(view.output).toBeNull();

      await t.relay.dispatcher.runOnce();
      expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
        type: "task.failed",
        data: { id: task!.id, status: "failed", error, usage: { points_charged: 40, points_refunded: 40 } },
      });
    });

    it("JSON 404 task_not_found for 10 minutes: failed as lost, saying it may have been charged", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{}]);
      up.tasks.clear();

      // Ten minutes of 404s, a read a minute: still in flight throughout (three were enough before).
      for (let i = 1; i <= 10; i++) {
        t.clock.advance(60_000);
        await t.relay.poller.runOnce();
        expect(up.reads).toHaveLength(i);
        expect((await readTask(t, client.apiKey, task!.id)).data.status).toBe("queued");
      }
      t.clock.advance(60_000);
      await t.relay.poller.runOnce();
      const view = await readTask(t, client.apiKey, task!.id);
      expect(view.data).toMatchObject({ status: "failed", error: { code: "task_not_found", request_id: "req_nf_11" } });
      expect(view.data.error.message).toContain("for 10 minutes; it is taken as lost. It may have been charged");

      t.clock.advance(10 * 60_000);
      await t.relay.poller.runOnce();
      expect(up.reads).toHaveLength(11);
    });

    it("404s that are not consecutive do not end the task", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{}]);
      const notFound = () => upstreamError(404, "task_not_found", "No such task.", "req_x");
      up.nextRead.push(notFound, notFound, () => undefined, notFound, notFound);
      for (let i = 0; i < 5; i++) {
        t.clock.advance(60_000);
        await t.relay.poller.runOnce();
      }
      expect(up.reads).toHaveLength(5);
      expect((await readTask(t, client.apiKey, task!.id)).data).toMatchObject({ status: "queued", error: null });
    });

    it("5xx and network errors on a read: retried later, the task keeps running", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const [task] = await submitted(t, up, client.apiKey, [{}]);
      up.nextRead.push(
        () => upstreamError(503, "service_unavailable", "busy", "req_b"),
        () => HttpResponse.error(),
      );
      up.set(task!.up, { status: "succeeded", output: { images: ["x"] } });
      for (let i = 0; i < 3; i++) {
        t.clock.advance(60_000);
        await t.relay.poller.runOnce();
      }
      expect(up.reads).toHaveLength(3);
      expect((await readTask(t, client.apiKey, task!.id)).data.status).toBe("succeeded");
    });

    it("429 with Retry-After pauses the account's reads: none before the pause ends", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const tasks = await submitted(t, up, client.apiKey, [{}, {}, {}]);
      up.onRead = (call) => {
        if (call.id !== "(list)") up.set(call.id, { status: "processing" });
        return undefined;
      };
      up.nextRead.push(() => upstreamError(429, "rate_limit", "Too many reads.", "req_rl", { "Retry-After": "20" }));

      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
      const limitedAt = up.reads[0]!.at;
      const before = up.reads.length;

      for (let i = 0; i < 40; i++) {
        t.clock.advance(500);
        const tick = await t.relay.poller.runOnce();
        // While paused, due tasks do not make the worker spin: it sleeps until the pause ends.
        if (t.clock.now() >= limitedAt + 1_000 && t.clock.now() < limitedAt + 20_000)
          expect(tick.nextDueAt).toBe(limitedAt + 20_000);
      }
      const during = up.reads.slice(before).filter((x) => x.at < limitedAt + 20_000);
      expect(during).toEqual([]);
      const after = up.reads.slice(before);
      expect(after.length).toBeGreaterThan(0);
      // The same read (a list sweep here: three tasks in flight) is made again once the pause is over.
      expect(after.map((x) => x.id)).toContain(up.reads[0]!.id);
      expect(tasks).toHaveLength(3);
    });
  });

  describe("poller: the read budget", () => {
    /** Deterministic pseudo-random steps, so a failure replays. */
    function lcg(seed: number): () => number {
      let s = seed >>> 0;
      return () => {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        return s / 2 ** 32;
      };
    }

    it.each([
      { lists: true, name: "list sweeps" },
      { lists: false, name: "single reads only (list body not understood)" },
    ])(
      "UPSTREAM_READS_PER_MINUTE=10 with 50 tasks in flight, $name: never more than 10 reads in any 60 s, and every task ends",
      async ({ lists }) => {
        const { t, up } = await setup({ UPSTREAM_READS_PER_MINUTE: "10" });
        up.listSupported = lists;
        const client = await t.client();
        const tasks = await submitted(
          t,
          up,
          client.apiKey,
          Array.from({ length: 50 }, () => ({})),
        );
        // Each upstream task runs 30 s from its creation, then succeeds (whether read singly or in a list).
        const progress = () => {
          for (const task of up.tasks.values()) {
            if (task.status === "succeeded") continue;
            if (t.clock.now() - task.createdAt! >= 30_000)
              up.set(task.id, {
                status: "succeeded",
                output: { images: [`https://cdn.test/${task.id}.png`] },
                usage: { points_charged: 20 },
              });
            else up.set(task.id, { status: "processing" });
          }
        };

        const random = lcg(7);
        const start = t.clock.now();
        while (t.clock.now() - start < 10 * 60_000) {
          t.clock.advance(100 + Math.floor(random() * 2_900));
          progress();
          await t.relay.poller.runOnce();
        }

        const times = up.reads.map((x) => x.at);
        expect(maxInWindow(times, 60_000)).toBeLessThanOrEqual(10);
        for (const task of tasks) expect((await storedTask(t, task.id)).status).toBe("succeeded");
        if (lists) {
          // List pages cover many tasks a read: far fewer reads than tasks.
          expect(times.length).toBeGreaterThan(0);
          expect(times.length).toBeLessThan(50);
        } else {
          // One read per task at least, and the budget used, not wasted, while work remains.
          expect(times.length).toBeGreaterThanOrEqual(50);
          expect(maxInWindow(times, 60_000)).toBe(10);
        }
      },
    );
  });
});

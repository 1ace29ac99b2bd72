import { upstreamSuite } from "../helpers/upstream-suite.js";
import { HttpResponse } from "msw";
import { describe, expect, it, vi } from "vitest";
import { createTask, readTask, storedTask } from "../helpers/flow.js";
import { type FakeUpstream, upstreamError } from "../helpers/fake-upstream.js";
import { verifyAt } from "../helpers/receiver.js";
import { LeaseOwner } from "../../src/workers/owner.js";
import { imageBody, UPSTREAM_KEY } from "../helpers/relay.js";

const { dialects, receiver } = upstreamSuite();

const keysOf = (up: FakeUpstream) => up.creates.map((c) => c.key);

describe.each(dialects)("on %s", (_dialect, setup) => {
  describe("submitter: accepted upstream", () => {
    it("201: stores upstream_task_id, sends the upstream body with Idempotency-Key genrelay-<task id>", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey, {
        callback_url: "http://127.0.0.1:9/hook",
        metadata: { order: "42" },
        style: "noir",
      });
      const lookups = vi.spyOn(t.store.tasks, "findByUpstreamId");

      await t.relay.submitter.runOnce();
      // The upstream id is bound by the write alone (its unique index refuses another task's id): no read first.
      expect(lookups).not.toHaveBeenCalled();

      expect(up.creates).toEqual([
        // Relay fields stay in the relay; unknown upstream fields pass through.
        {
          type: "image",
          key: `genrelay-${id}`,
          auth: `Bearer ${UPSTREAM_KEY}`,
          body: { ...imageBody(), style: "noir" },
          at: t.clock.now(),
        },
      ]);
      const view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({ id, status: "queued", upstream_task_id: "up_1", error: null });
      expect(await storedTask(t, id)).toMatchObject({
        phase: "submitted",
        submitAttempts: 1,
        upstreamIdempotencyKey: `genrelay-${id}`,
      });

      // Nothing more to submit.
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);
    });

    it("200 replay (first answer lost): keeps the original upstream task, one task created upstream", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      // The upstream creates the task, but the answer never arrives.
      up.nextCreate.push((call) => {
        up.seed({ id: "up_orig", key: call.key!, type: "image", status: "processing" });
        return HttpResponse.error();
      });

      await t.relay.submitter.runOnce();
      expect((await readTask(t, client.apiKey, id)).data).toMatchObject({ status: "queued", upstream_task_id: null });

      t.clock.advance(1_000);
      await t.relay.submitter.runOnce();

      expect(keysOf(up)).toEqual([`genrelay-${id}`, `genrelay-${id}`]);
      expect(up.tasks.size).toBe(1);
      const view = await readTask(t, client.apiKey, id);
      // The replayed task is already processing: the relay takes its status from the replay.
      expect(view.data).toMatchObject({ status: "processing", upstream_task_id: "up_orig" });
    });
  });

  describe("submitter: replays and leases", () => {
    it("a replay showing a task that already ended: the relay task ends with its output or error, usage and event", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const id = await createTask(t, client.apiKey, { callback_url: r.url() });
      const error = {
        code: "generation_failed",
        message: "The model could not render this prompt.",
        request_id: "req_gen",
      };
      up.seed({
        id: "up_done",
        key: `genrelay-${id}`,
        type: "image",
        status: "failed",
        usage: { points_charged: 20, points_refunded: 20 },
        error,
      });

      await t.relay.submitter.runOnce();

      const view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({ status: "failed", upstream_task_id: "up_done", error });
      expect(view.usage).toEqual({ points_charged: 20, points_refunded: 20 });
      expect(await storedTask(t, id)).toMatchObject({ phase: "done", nextRunAt: null });
      await t.relay.dispatcher.runOnce();
      expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
        type: "task.failed",
        data: { id, error },
      });
      // Never polled: it is over.
      t.clock.advance(60_000);
      await t.relay.poller.runOnce();
      expect(up.reads).toHaveLength(0);
    });

    it("a submission whose worker died is taken over when its lease expires, with the same key; the dead worker cannot write", async () => {
      const { t, up } = await setup({ UPSTREAM_TIMEOUT_MS: "10000" });
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      const dead = new LeaseOwner("dead");
      const [claimed] = await t.store.tasks.claimFairly("default", {
        now: t.clock.now(),
        leaseMs: 15_000,
        token: dead.token(),
        limit: 1,
      });
      expect(claimed!.id).toBe(id);
      await t.store.tasks.reschedule(id, claimed!.claimToken!, { submitAttempts: 1 });

      await t.relay.submitter.runOnce();
      t.clock.advance(14_999);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(0);

      t.clock.advance(2);
      await t.relay.submitter.runOnce();
      expect(keysOf(up)).toEqual([`genrelay-${id}`]);
      expect(await storedTask(t, id)).toMatchObject({ phase: "submitted", upstreamTaskId: "up_1", submitAttempts: 2 });
      expect(
        await t.store.tasks.reschedule(id, claimed!.claimToken!, { status: "failed", phase: "done" }),
      ).toBeUndefined();
      expect((await storedTask(t, id)).phase).toBe("submitted");
    });
  });

  describe("submitter: retryable failures keep the task queued and reuse the key", () => {
    const cases: Array<[string, () => Response]> = [
      ["503 service_unavailable", () => upstreamError(503, "service_unavailable", "Try later.", "req_503")],
      ["500 without a body", () => new HttpResponse(null, { status: 500 })],
      ["network error", () => HttpResponse.error()],
      [
        "malformed 201 body (not JSON)",
        () => new HttpResponse("<html>oops</html>", { status: 201, headers: { "Content-Type": "text/html" } }),
      ],
      ["malformed 201 body (no task id)", () => HttpResponse.json({ ok: true }, { status: 201 })],
    ];

    it.each(cases)("%s: queued, retried after backoff with the same Idempotency-Key", async (_name, answer) => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      up.nextCreate.push(answer, answer);

      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);
      let view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({ status: "queued", upstream_task_id: null, error: null });
      expect((await storedTask(t, id)).phase).toBe("waiting");

      // Not before the backoff (1 s after the first failure, 2 s after the second).
      await t.relay.submitter.runOnce();
      t.clock.advance(999);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);

      t.clock.advance(1);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(2);

      t.clock.advance(1_999);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(2);
      t.clock.advance(1);
      await t.relay.submitter.runOnce();

      expect(keysOf(up)).toEqual([`genrelay-${id}`, `genrelay-${id}`, `genrelay-${id}`]);
      view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({ status: "queued", upstream_task_id: "up_1", error: null });
      expect((await storedTask(t, id)).phase).toBe("submitted");
    });

    it("gives up after 24 hours of failures: failed, saying the upstream may have charged it", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      up.onCreate = () => upstreamError(503, "service_unavailable", "Down for maintenance.", "req_down");
      for (let i = 0; i < 400 && (await storedTask(t, id)).phase === "waiting"; i++) {
        await t.relay.submitter.runOnce();
        t.clock.advance(5 * 60_000);
      }
      const view = await readTask(t, client.apiKey, id);
      expect(view.data.status).toBe("failed");
      expect(view.data.error).toEqual({
        code: "upstream_outcome_unknown",
        message:
          "The upstream may have created and charged this task, but it could not be reached for 24 hours (last: service_unavailable). Check the upstream account before retrying.",
        request_id: "req_down",
      });
      expect(new Set(keysOf(up))).toEqual(new Set([`genrelay-${id}`]));
      // Backoff caps at 5 minutes: about a day's worth of attempts, not thousands.
      expect(up.creates.length).toBeGreaterThan(250);
      expect(up.creates.length).toBeLessThan(320);
      // About 290 rounds of the submitter: on PostgreSQL, a few round trips each, which a busy
      // 2-core machine stretches past the default 20 s.
    }, 60_000);
  });

  describe("submitter: final upstream errors end the task failed", () => {
    const cases: Array<[number, string, string]> = [
      [400, "invalid_request", "prompt: unsupported characters."],
      [402, "insufficient_points", "Credit balance too low."],
      [422, "validation_error", "size is not supported by this model."],
    ];

    it("409 idempotency_key_reused: retried with the same key for 30 minutes (the original may still be in creation), then its fate is unknown", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      up.onCreate = () => upstreamError(409, "idempotency_key_reused", "The original is still processing.", "req_409");
      for (let i = 0; i < 100 && (await storedTask(t, id)).phase === "waiting"; i++) {
        await t.relay.submitter.runOnce();
        t.clock.advance(60_000);
      }
      expect(new Set(up.creates.map((c) => c.key))).toEqual(new Set([`genrelay-${id}`]));
      // Backoff grows to 2 minutes: a few dozen tries over the half hour, not one per tick.
      expect(up.creates.length).toBeGreaterThan(12);
      expect(up.creates.length).toBeLessThan(40);
      const view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({
        status: "failed",
        error: { code: "upstream_outcome_unknown", request_id: "req_409" },
      });
      expect(view.data.error.message).toMatch(/409 idempotency_key_reused for 3\d minutes/);
      expect(view.usage).toEqual({ points_charged: null, points_refunded: null });
    });

    it("409 then a replay: the original upstream task is adopted, not failed", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      up.nextCreate.push(() =>
        upstreamError(409, "idempotency_key_reused", "The original is still processing.", "req_409"),
      );
      await t.relay.submitter.runOnce();
      expect((await storedTask(t, id)).phase).toBe("waiting");
      t.clock.advance(10_000);
      await t.relay.submitter.runOnce();
      expect(await storedTask(t, id)).toMatchObject({ phase: "submitted", upstreamTaskId: "up_1" });
    });

    it.each(cases)(
      "%i %s: failed with the upstream error kept, and task.failed delivered",
      async (status, code, message) => {
        const { t, up } = await setup();
        const r = await receiver();
        const client = await t.client();
        const id = await createTask(t, client.apiKey, { callback_url: r.url(), metadata: { order: "7" } });
        up.nextCreate.push(() => upstreamError(status, code, message, `req_${status}`));

        await t.relay.submitter.runOnce();

        const view = await readTask(t, client.apiKey, id);
        expect(view.data).toMatchObject({
          status: "failed",
          upstream_task_id: null,
          error: { code, message, request_id: `req_${status}` },
        });
        expect(view.data.completed_at).toBe(new Date(t.clock.now()).toISOString());
        expect((await storedTask(t, id)).phase).toBe("done");

        // Never retried.
        t.clock.advance(10 * 60_000);
        await t.relay.submitter.runOnce();
        expect(up.creates).toHaveLength(1);

        await t.relay.dispatcher.runOnce();
        expect(r.requests).toHaveLength(1);
        const got = r.requests[0]!;
        expect(verifyAt(client.secret, got, t.clock.now())).toMatchObject({
          type: "task.failed",
          data: {
            id,
            status: "failed",
            error: { code, message, request_id: `req_${status}` },
            metadata: { order: "7" },
            previous_status: "queued",
            sequence: 1,
          },
        });
        expect((await readTask(t, client.apiKey, id)).data.callback.delivery).toMatchObject({
          status: "succeeded",
          attempts: 1,
          last_status_code: 200,
        });
      },
    );
  });

  describe("submitter: upstream limits", () => {
    it("429 concurrent_limit: stays queued; learned capacity holds further tasks until a running one ends", async () => {
      const { t, up } = await setup();
      up.maxConcurrent = 1;
      const client = await t.client();
      const first = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      expect((await storedTask(t, first)).phase).toBe("submitted");

      t.clock.advance(100);
      const second = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      expect(up.creates.map((c) => c.key)).toEqual([`genrelay-${first}`, `genrelay-${second}`]);
      let view = await readTask(t, client.apiKey, second);
      expect(view.data).toMatchObject({ status: "queued", error: null, upstream_task_id: null });
      expect(await storedTask(t, second)).toMatchObject({ phase: "waiting", submitAttempts: 0 });

      // A newer task is not sent either: the relay learned the account holds one running task.
      t.clock.advance(100);
      const third = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      t.clock.advance(1_000);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(2);

      // The running task ends; the poller sees it, and the waiting task goes out at once, in order.
      up.set(up.taskOf(first)!.id, { status: "succeeded", output: { images: ["https://cdn.test/1.png"] } });
      t.clock.advance(1_000);
      await t.relay.poller.runOnce();
      expect((await readTask(t, client.apiKey, first)).data.status).toBe("succeeded");
      await t.relay.submitter.runOnce();
      expect(up.creates.map((c) => c.key)).toEqual([`genrelay-${first}`, `genrelay-${second}`, `genrelay-${second}`]);
      view = await readTask(t, client.apiKey, second);
      expect(view.data).toMatchObject({ status: "queued", upstream_task_id: up.taskOf(second)!.id });
      expect((await storedTask(t, third)).phase).toBe("waiting");
      expect(up.creates).toHaveLength(3);
    });

    it("429 concurrent_limit below UPSTREAM_MAX_CONCURRENT: the learned limit wins (another app shares the account)", async () => {
      const { t, up } = await setup({ UPSTREAM_MAX_CONCURRENT: "5" });
      up.maxConcurrent = 1;
      const client = await t.client();
      await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      const second = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(2);
      for (let i = 0; i < 5; i++) {
        const tick = await t.relay.submitter.runOnce();
        // Held back, not hammering the upstream: the worker looks again in 30 s unless nudged.
        expect(tick).toEqual({ didWork: false, nextDueAt: t.clock.now() + 30_000 });
        t.clock.advance(1_000);
      }
      expect(up.creates).toHaveLength(2);
      expect((await storedTask(t, second)).phase).toBe("waiting");
    });

    it("429 rate_limit with Retry-After: the account submits nothing before then", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey);
      up.nextCreate.push(() => upstreamError(429, "rate_limit", "Slow down.", "req_rl", { "Retry-After": "30" }));
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);
      expect((await readTask(t, client.apiKey, id)).data).toMatchObject({ status: "queued", error: null });

      t.clock.advance(10_000);
      const other = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      t.clock.advance(19_999);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);

      // While paused, the worker sleeps until the pause ends instead of spinning on the rows already due.
      expect((await t.relay.submitter.runOnce()).nextDueAt).toBe(up.creates[0]!.at + 30_000);

      t.clock.advance(1);
      await t.relay.submitter.runOnce();
      expect(
        up.creates
          .slice(1)
          .map((c) => c.key)
          .sort(),
      ).toEqual([`genrelay-${id}`, `genrelay-${other}`].sort());
      expect(up.creates.every((c, i) => i === 0 || c.at >= up.creates[0]!.at + 30_000)).toBe(true);
    });

    it("while the account is at its cap, a creation does not wake the submitter (it could not send it); a task ending does, and so do creations after it", async () => {
      const { t, up } = await setup({ UPSTREAM_MAX_CONCURRENT: "1" });
      const client = await t.client();
      await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);
      // A second one waits: the tick finds the account full.
      await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(1);
      const nudge = vi.spyOn(t.relay.loopsByName.submitter, "nudge");
      for (let i = 0; i < 5; i++) await createTask(t, client.apiKey);
      expect(nudge).not.toHaveBeenCalled();
      // A task with a deadline still wakes it (its expiry must be watched).
      await createTask(t, client.apiKey, { expires_after_seconds: 600 });
      expect(nudge).toHaveBeenCalledTimes(1);
      // The running task ends: the submitter is woken, sends the next, and the account is full again.
      up.finishAll("succeeded");
      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
      expect(nudge.mock.calls.length).toBeGreaterThan(1);
      await t.relay.submitter.runOnce();
      expect(up.creates).toHaveLength(2);
      // Until a tick finds it full again, a creation wakes the submitter.
      nudge.mockClear();
      await createTask(t, client.apiKey);
      expect(nudge).toHaveBeenCalledTimes(1);
      await t.relay.submitter.runOnce();
      expect(t.relay.submitter.isFull("default")).toBe(true);
    });

    it("fairness: a client with 30 waiting tasks does not starve one with 3 (round-robin)", async () => {
      const { t, up } = await setup({ UPSTREAM_MAX_CONCURRENT: "2" });
      const a = await t.client("a");
      t.clock.advance(1);
      const b = await t.client("b");
      const aTasks: string[] = [];
      const bTasks: string[] = [];
      for (let i = 0; i < 30; i++) {
        aTasks.push(await createTask(t, a.apiKey));
        t.clock.advance(1);
      }
      for (let i = 0; i < 3; i++) {
        bTasks.push(await createTask(t, b.apiKey));
        t.clock.advance(1);
      }

      const batches: string[][] = [];
      for (let round = 0; round < 40 && up.creates.length < 33; round++) {
        const before = up.creates.length;
        await t.relay.submitter.runOnce();
        batches.push(
          up.creates
            .slice(before)
            .map((c) => c.key!.replace("genrelay-", ""))
            .sort(),
        );
        expect(up.running()).toBeLessThanOrEqual(2);
        up.finishAll("succeeded");
        t.clock.advance(2_000);
        await t.relay.poller.runOnce();
      }

      expect(up.creates).toHaveLength(33);
      expect(new Set(up.creates.map((c) => c.key)).size).toBe(33);
      // Each client's oldest waiting task before anyone's second: A, B, A, B, A, B, then A's rest in order.
      const expected = [
        [aTasks[0], bTasks[0]],
        [aTasks[1], bTasks[1]],
        [aTasks[2], bTasks[2]],
        ...Array.from({ length: 13 }, (_, i) => [aTasks[3 + 2 * i], aTasks[4 + 2 * i]]),
        [aTasks[29]],
      ].map((batch) => (batch as string[]).sort());
      expect(batches).toEqual(expected);
    });
  });

  describe("submitter: expiry", () => {
    it("an expired task never reaches the upstream; it ends canceled with error.code expired", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const id = await createTask(t, client.apiKey, { expires_after_seconds: 5, callback_url: r.url() });
      t.clock.advance(5_000);

      await t.relay.submitter.runOnce();

      expect(up.creates).toHaveLength(0);
      const view = await readTask(t, client.apiKey, id);
      expect(view.data).toMatchObject({
        status: "canceled",
        upstream_task_id: null,
        error: { code: "expired", request_id: null },
      });
      expect(view.data.error.message).toMatch(/expired/);
      expect(view.usage).toEqual({ points_charged: 0, points_refunded: 0 });

      await t.relay.dispatcher.runOnce();
      expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
        type: "task.canceled",
        data: { id, status: "canceled", error: { code: "expired" } },
      });
    });

    it("a task not yet expired is submitted normally", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey, { expires_after_seconds: 5 });
      t.clock.advance(4_999);
      await t.relay.submitter.runOnce();
      expect(keysOf(up)).toEqual([`genrelay-${id}`]);
    });

    it("a task already offered upstream does not expire: it is retried with its key (the upstream may hold it)", async () => {
      const { t, up } = await setup();
      const client = await t.client();
      const id = await createTask(t, client.apiKey, { expires_after_seconds: 5 });
      up.nextCreate.push(() => HttpResponse.error());
      await t.relay.submitter.runOnce();
      t.clock.advance(10_000);
      await t.relay.submitter.runOnce();
      expect(keysOf(up)).toEqual([`genrelay-${id}`, `genrelay-${id}`]);
      expect((await readTask(t, client.apiKey, id)).data).toMatchObject({
        status: "queued",
        upstream_task_id: "up_1",
        error: null,
      });
    });

    it("a task that expires while the account is full ends at its expiry, not when capacity frees", async () => {
      const { t, up } = await setup({ UPSTREAM_MAX_CONCURRENT: "1" });
      const client = await t.client();
      const running = await createTask(t, client.apiKey);
      await t.relay.submitter.runOnce();
      const waiting = await createTask(t, client.apiKey, { expires_after_seconds: 5 });
      await t.relay.submitter.runOnce();
      expect((await readTask(t, client.apiKey, waiting)).data.status).toBe("queued");

      t.clock.advance(5_000);
      await t.relay.submitter.runOnce();

      expect(keysOf(up)).toEqual([`genrelay-${running}`]);
      expect((await readTask(t, client.apiKey, waiting)).data).toMatchObject({
        status: "canceled",
        error: { code: "expired" },
      });
    });
  });
});

import { upstreamSuite } from "../helpers/upstream-suite.js";
import { describe, expect, it } from "vitest";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import { createTask, readTask } from "../helpers/flow.js";
import { type Answer, hang, ok, status, verifyAt } from "../helpers/receiver.js";
import type { DialectRelay } from "../helpers/relay.js";

const { dialects, receiver } = upstreamSuite();

/** Upper end of the ±20% jitter on the schedule's steps. */
const AFTER_5S = 6_001;
const AFTER_1M = 72_001;

/**
 * A task that went through the whole pipeline: created, submitted, read as processing (when
 * `processing`), then read as succeeded. Its events are written but not yet delivered.
 */
async function finishedTask(
  t: DialectRelay,
  up: FakeUpstream,
  apiKey: string,
  extra: Record<string, unknown>,
  opts: { processing?: boolean } = {},
) {
  const id = await createTask(t, apiKey, { metadata: { order: "1234" }, ...extra });
  await t.relay.submitter.runOnce();
  const upId = up.taskOf(id)!.id;
  if (opts.processing) {
    up.set(upId, { status: "processing" });
    t.clock.advance(2_000);
    await t.relay.poller.runOnce();
  }
  up.set(upId, {
    status: "succeeded",
    output: { images: [{ url: "https://cdn.test/fox.png" }] },
    usage: { points_charged: 20, points_refunded: 0 },
  });
  t.clock.advance(opts.processing ? 60_000 : 2_000);
  await t.relay.poller.runOnce();
  expect((await readTask(t, apiKey, id)).data.status).toBe("succeeded");
  return id;
}

async function deliveries(t: DialectRelay, apiKey: string, id: string): Promise<any[]> {
  const res = await t.request(apiKey, `/openapi/v1/tasks/${id}/deliveries`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: any[] }).data;
}

/**
 * A relay of this dialect (`env` added), a receiver answering with `answer`, a client, and its
 * task finished upstream with its callback to the receiver: ready for the dispatcher.
 */
async function deliveredTask(
  setup: (env?: Record<string, string>) => Promise<{ t: DialectRelay; up: FakeUpstream }>,
  answer?: Answer,
  env?: Record<string, string>,
) {
  const { t, up } = await setup(env);
  const r = await receiver(answer);
  const client = await t.client();
  const id = await finishedTask(t, up, client.apiKey, { callback_url: r.url() });
  return { t, up, r, client, id };
}

/** The callback delivery summary of the task's view (GET /openapi/v1/tasks/{id}). */
const deliveryOf = async (t: Pick<DialectRelay, "request">, apiKey: string, id: string) =>
  (await readTask(t, apiKey, id)).data.callback.delivery;

describe.each(dialects)("on %s", (_dialect, setup) => {
  describe("dispatcher: one delivery", () => {
    it("delivers a Standard Webhooks-signed task.succeeded with the task flattened in data", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const id = await finishedTask(t, up, client.apiKey, { callback_url: r.url("/hooks/genrelay?src=test") });

      expect(await t.relay.dispatcher.runOnce()).toBe(1);

      expect(r.requests).toHaveLength(1);
      const got = r.requests[0]!;
      expect(got.method).toBe("POST");
      expect(got.url).toBe("/hooks/genrelay?src=test");
      expect(got.headers["content-type"]).toBe("application/json");
      expect(got.headers["webhook-id"]).toMatch(/^evt_[0-9a-z]{26}$/);
      expect(got.headers["webhook-timestamp"]).toBe(String(Math.floor(t.clock.now() / 1000)));
      expect(got.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);

      const body = verifyAt(client.secret, got, t.clock.now()) as {
        type: string;
        timestamp: string;
        data: Record<string, any>;
      };
      expect(Object.keys(body).sort()).toEqual(["data", "id", "timestamp", "type"]);
      // The body's id is the webhook-id header, for tools that see only the body (docs/contract.md, "Webhook body").
      expect((body as { id?: string }).id).toBe(got.headers["webhook-id"]);
      expect(body.type).toBe("task.succeeded");
      expect(new Date(body.timestamp).toISOString()).toBe(body.timestamp);
      expect(body.data).toMatchObject({
        id,
        type: "image",
        status: "succeeded",
        model: "p-image",
        output: { images: [{ url: "https://cdn.test/fox.png" }] },
        usage: { points_charged: 20, points_refunded: 0 },
        metadata: { order: "1234" },
        error: null,
        upstream_task_id: up.taskOf(id)!.id,
        sequence: 1,
        previous_status: "queued",
        callback: {
          url: r.url("/hooks/genrelay?src=test"),
          events: ["task.succeeded", "task.failed", "task.canceled"],
        },
      });
      // Another secret does not verify it.
      const other = await t.client("other");
      expect(() => verifyAt(other.secret, got, t.clock.now())).toThrow();

      const view = await readTask(t, client.apiKey, id);
      expect(view.data.callback.delivery).toEqual({
        status: "succeeded",
        attempts: 1,
        last_attempt_at: new Date(t.clock.now()).toISOString(),
        last_status_code: 200,
      });
      // Nothing left to send.
      t.clock.advance(60 * 60_000);
      expect(await t.relay.dispatcher.runOnce()).toBe(0);
    });

    it("retries a failure with the same webhook-id and a fresh timestamp; the attempts are listed", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      r.answers.push(status(500));
      const client = await t.client();
      const id = await finishedTask(t, up, client.apiKey, { callback_url: r.url() });

      await t.relay.dispatcher.runOnce();
      const firstAt = t.clock.now();
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({
        status: "pending",
        attempts: 1,
        last_status_code: 500,
      });

      // Not before the schedule's 5 s (less 20% jitter).
      t.clock.advance(3_999);
      expect(await t.relay.dispatcher.runOnce()).toBe(0);
      t.clock.advance(AFTER_5S - 3_999);
      expect(await t.relay.dispatcher.runOnce()).toBe(1);

      const [first, second] = r.requests;
      expect(second!.headers["webhook-id"]).toBe(first!.headers["webhook-id"]);
      expect(second!.body).toBe(first!.body);
      expect(first!.headers["webhook-timestamp"]).toBe(String(Math.floor(firstAt / 1000)));
      expect(second!.headers["webhook-timestamp"]).toBe(String(Math.floor(t.clock.now() / 1000)));
      expect(second!.headers["webhook-signature"]).not.toBe(first!.headers["webhook-signature"]);
      verifyAt(client.secret, first!, firstAt);
      verifyAt(client.secret, second!, t.clock.now());

      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({
        status: "succeeded",
        attempts: 2,
        last_status_code: 200,
      });
      const attempts = await deliveries(t, client.apiKey, id);
      expect(attempts).toEqual([
        {
          id: expect.stringMatching(/^att_/),
          event_id: first!.headers["webhook-id"],
          destination: "callback",
          event_type: "task.succeeded",
          url: r.url(),
          attempted_at: new Date(firstAt).toISOString(),
          outcome: "failed",
          status_code: 500,
          latency_ms: expect.any(Number),
          error: "HTTP 500",
          response_body: "status 500",
        },
        {
          id: expect.stringMatching(/^att_/),
          event_id: first!.headers["webhook-id"],
          destination: "callback",
          event_type: "task.succeeded",
          url: r.url(),
          attempted_at: new Date(t.clock.now()).toISOString(),
          outcome: "succeeded",
          status_code: 200,
          latency_ms: expect.any(Number),
          error: null,
          response_body: "ok",
        },
      ]);
    });

    it("410 Gone stops the retries: delivery failed", async () => {
      const { t, r, client, id } = await deliveredTask(setup, status(410));

      await t.relay.dispatcher.runOnce();
      t.clock.advance(2 * 60 * 60_000);
      await t.relay.dispatcher.runOnce();

      expect(r.requests).toHaveLength(1);
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({
        status: "failed",
        attempts: 1,
        last_status_code: 410,
      });
    });

    it("a receiver that never answers: the attempt times out (WEBHOOK_TIMEOUT_MS) and is recorded as failed", async () => {
      const { t, r, client, id } = await deliveredTask(setup, hang, { WEBHOOK_TIMEOUT_MS: "300" });

      const started = Date.now();
      await t.relay.dispatcher.runOnce();
      expect(Date.now() - started).toBeLessThan(5_000);

      expect(r.requests).toHaveLength(1);
      const [attempt] = await deliveries(t, client.apiKey, id);
      expect(attempt).toMatchObject({
        outcome: "failed",
        status_code: null,
        error: "timeout after 300 ms",
        response_body: null,
      });
      expect(attempt.latency_ms).toBeGreaterThanOrEqual(250);
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({
        status: "pending",
        attempts: 1,
        last_status_code: null,
      });
    });

    it("exhausts the schedule: delivery failed, attempts = schedule length, then silence", async () => {
      const { t, r, client, id } = await deliveredTask(setup, status(500));

      await t.relay.dispatcher.runOnce();
      t.clock.advance(AFTER_5S);
      await t.relay.dispatcher.runOnce();
      t.clock.advance(AFTER_1M);
      await t.relay.dispatcher.runOnce();
      t.clock.advance(24 * 60 * 60_000);
      await t.relay.dispatcher.runOnce();

      expect(r.requests).toHaveLength(3);
      const view = await readTask(t, client.apiKey, id);
      expect(view.data.callback.delivery).toMatchObject({ status: "failed", attempts: 3, last_status_code: 500 });
      expect(await deliveries(t, client.apiKey, id)).toHaveLength(3);
    });

    it("honours the receiver's Retry-After over the schedule", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      r.answers.push(status(503, { "Retry-After": "120" }));
      const client = await t.client();
      await finishedTask(t, up, client.apiKey, { callback_url: r.url() });

      await t.relay.dispatcher.runOnce();
      t.clock.advance(AFTER_5S);
      await t.relay.dispatcher.runOnce();
      t.clock.advance(120_000 - AFTER_5S - 1);
      await t.relay.dispatcher.runOnce();
      expect(r.requests).toHaveLength(1);

      t.clock.advance(1);
      await t.relay.dispatcher.runOnce();
      expect(r.requests).toHaveLength(2);
    });

    it("redeliver sends the last event again with the same webhook-id", async () => {
      const { t, r, client, id } = await deliveredTask(setup);
      await t.relay.dispatcher.runOnce();

      t.clock.advance(60_000);
      const res = await t.request(client.apiKey, `/openapi/v1/tasks/${id}/redeliver`, { method: "POST" });
      expect(res.status).toBe(202);
      expect(await res.json()).toEqual({
        data: { event_id: r.requests[0]!.headers["webhook-id"], event_type: "task.succeeded", status: "pending" },
      });
      await t.relay.dispatcher.runOnce();

      expect(r.requests).toHaveLength(2);
      expect(r.requests[1]!.headers["webhook-id"]).toBe(r.requests[0]!.headers["webhook-id"]);
      expect(r.requests[1]!.body).toBe(r.requests[0]!.body);
      verifyAt(client.secret, r.requests[1]!, t.clock.now());
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "succeeded", attempts: 2 });
      expect((await deliveries(t, client.apiKey, id)).map((a) => a.outcome)).toEqual(["succeeded", "succeeded"]);
    });

    it("redeliver of an exhausted delivery starts a new round of the schedule", async () => {
      const { t, r, client, id } = await deliveredTask(setup, status(500), { WEBHOOK_RETRY_SCHEDULE: "0s,5s" });
      await t.relay.dispatcher.runOnce();
      t.clock.advance(AFTER_5S);
      await t.relay.dispatcher.runOnce();
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "failed", attempts: 2 });

      expect((await t.request(client.apiKey, `/openapi/v1/tasks/${id}/redeliver`, { method: "POST" })).status).toBe(
        202,
      );
      await t.relay.dispatcher.runOnce();
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "pending", attempts: 3 });
      r.fallback = ok;
      t.clock.advance(AFTER_5S);
      await t.relay.dispatcher.runOnce();
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "succeeded", attempts: 4 });
    });
  });

  describe("dispatcher: leases", () => {
    it("an event claimed by a worker that died is delivered after its lease expires, same webhook-id", async () => {
      const { t, r, client, id } = await deliveredTask(setup);
      const [claimed] = await t.store.events.claimDue({
        now: t.clock.now(),
        leaseMs: 10_000,
        token: "dead:1",
        limit: 10,
        excludeKeys: [],
        keyRoom: () => 10,
        maxPerKey: 10,
      });
      expect(claimed!.taskId).toBe(id);

      expect(await t.relay.dispatcher.runOnce()).toBe(0);
      t.clock.advance(10_001);
      expect(await t.relay.dispatcher.runOnce()).toBe(1);
      expect(r.requests[0]!.headers["webhook-id"]).toBe(claimed!.id);
      // The dead worker's late bookkeeping cannot overwrite the delivery.
      await t.store.events.release(claimed!.id, "dead:1", { deliveryStatus: "failed" });
      expect((await t.store.events.find(claimed!.id))!.deliveryStatus).toBe("succeeded");
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "succeeded", attempts: 1 });
    });
  });

  describe("dispatcher: order, secrets, isolation", () => {
    it("delivers one task's events in order, even when the first attempt of the first event fails", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      r.answers.push(status(500));
      const client = await t.client();
      const id = await finishedTask(
        t,
        up,
        client.apiKey,
        { callback_url: r.url(), callback_events: ["task.processing", "task.succeeded"] },
        { processing: true },
      );

      // Both events are due; only the first goes.
      expect(await t.relay.dispatcher.runOnce()).toBe(1);
      t.clock.advance(AFTER_5S);
      // Again only the first; the second waits for it to be delivered.
      expect(await t.relay.dispatcher.runOnce()).toBe(1);
      expect(await t.relay.dispatcher.runOnce()).toBe(1);
      expect(await t.relay.dispatcher.runOnce()).toBe(0);

      const seen = r.requests.map((x) => [x.json.type, x.json.data.sequence, x.json.data.previous_status]);
      expect(seen).toEqual([
        ["task.processing", 1, "queued"],
        ["task.processing", 1, "queued"],
        ["task.succeeded", 2, "processing"],
      ]);
      expect(r.requests[2]!.headers["webhook-id"]).not.toBe(r.requests[0]!.headers["webhook-id"]);
      expect((await deliveries(t, client.apiKey, id)).map((a) => [a.event_type, a.outcome])).toEqual([
        ["task.processing", "failed"],
        ["task.processing", "succeeded"],
        ["task.succeeded", "succeeded"],
      ]);
    });

    it("after a secret rotation, events carry both signatures for 24 h, then only the new one", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const res = await t.request(client.apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
      expect(res.status).toBe(200);
      const rotatedAt = t.clock.now();
      const { data } = (await res.json()) as { data: { webhook_secret: string; previous_secret_expires_at: string } };
      expect(data.webhook_secret).toMatch(/^whsec_/);
      expect(data.webhook_secret).not.toBe(client.secret);
      expect(data.previous_secret_expires_at).toBe(new Date(rotatedAt + 24 * 60 * 60_000).toISOString());

      const id = await finishedTask(t, up, client.apiKey, { callback_url: r.url() });
      await t.relay.dispatcher.runOnce();
      const during = r.requests[0]!;
      expect(during.headers["webhook-signature"]!.split(" ")).toHaveLength(2);
      expect(verifyAt(client.secret, during, t.clock.now())).toMatchObject({ type: "task.succeeded" });
      expect(verifyAt(data.webhook_secret, during, t.clock.now())).toMatchObject({ type: "task.succeeded" });

      t.clock.set(rotatedAt + 24 * 60 * 60_000 + 1);
      expect((await t.request(client.apiKey, `/openapi/v1/tasks/${id}/redeliver`, { method: "POST" })).status).toBe(
        202,
      );
      await t.relay.dispatcher.runOnce();
      const after = r.requests[1]!;
      expect(after.headers["webhook-signature"]!.split(" ")).toHaveLength(1);
      expect(verifyAt(data.webhook_secret, after, t.clock.now())).toMatchObject({ type: "task.succeeded" });
      expect(() => verifyAt(client.secret, after, t.clock.now())).toThrow(/signature/i);
    });

    it("POST /webhooks/test pings a receiver with a signed ping and reports the attempt", async () => {
      const { t } = await setup();
      const r = await receiver();
      const client = await t.client();
      const res = await t.request(client.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url("/ping") },
      });
      expect(res.status).toBe(200);
      const { data } = (await res.json()) as { data: Record<string, unknown> };
      expect(data).toEqual({
        webhook_id: expect.stringMatching(/^evt_/),
        type: "ping",
        url: r.url("/ping"),
        succeeded: true,
        status_code: 200,
        latency_ms: expect.any(Number),
        error: null,
      });
      expect(r.requests).toHaveLength(1);
      expect(r.requests[0]!.headers["webhook-id"]).toBe(data.webhook_id);
      expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({
        type: "ping",
        data: { client_id: client.id },
      });

      r.answers.push(status(500));
      const failed = await t.request(client.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url("/ping") },
      });
      expect(((await failed.json()) as { data: unknown }).data).toMatchObject({
        succeeded: false,
        status_code: 500,
        error: "HTTP 500",
      });
    });

    it("POST /webhooks/test is rate-limited per client (429 rate_limit with Retry-After), other clients unaffected", async () => {
      const { t } = await setup();
      const r = await receiver();
      const a = await t.client("a");
      const b = await t.client("b");
      for (let i = 0; i < 10; i++) {
        expect(
          (await t.request(a.apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: r.url("/ping") } }))
            .status,
        ).toBe(200);
      }
      const limited = await t.request(a.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url("/ping") },
      });
      expect(limited.status).toBe(429);
      expect(limited.headers.get("retry-after")).toBe("60");
      expect(((await limited.json()) as { error: { code: string } }).error.code).toBe("rate_limit");
      expect(r.requests).toHaveLength(10);
      expect(
        (await t.request(b.apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: r.url("/ping") } }))
          .status,
      ).toBe(200);
      t.clock.advance(60_001);
      expect(
        (await t.request(a.apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: r.url("/ping") } }))
          .status,
      ).toBe(200);
    });

    it("POST /webhooks/test obeys the per-host cap and the breaker: 429 while the client's key is full or open", async () => {
      const { t } = await setup({ WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "1" });
      const r = await receiver(hang);
      const client = await t.client();
      const first = t.request(client.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url("/slow") },
      });
      for (let i = 0; i < 50 && r.requests.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      const second = await t.request(client.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url("/slow") },
      });
      expect(second.status).toBe(429);
      expect(r.requests).toHaveLength(1);
      expect(((await (await first).json()) as { data: { error: string } }).data.error).toMatch(/timeout/);
    });

    it("POST /webhooks/test refuses a loopback URL when private networks are not allowed", async () => {
      const { t } = await setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
      const r = await receiver();
      const client = await t.client();
      const res = await t.request(client.apiKey, "/openapi/v1/webhooks/test", {
        method: "POST",
        json: { url: r.url() },
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_callback_url");
      expect(r.requests).toHaveLength(0);
    });

    it("GET /events is a cursor feed of the caller's events, also for tasks without callback_url", async () => {
      const { t, up } = await setup();
      const r = await receiver();
      const client = await t.client();
      const first = await finishedTask(
        t,
        up,
        client.apiKey,
        { callback_url: r.url(), callback_events: ["task.processing", "task.succeeded"] },
        { processing: true },
      );
      const second = await finishedTask(t, up, client.apiKey, {});
      await t.relay.dispatcher.runOnce();

      let res = await t.request(client.apiKey, "/openapi/v1/events?limit=2");
      expect(res.status).toBe(200);
      const page1 = (await res.json()) as { data: any[]; next_cursor: string };
      expect(page1.data.map((e) => [e.type, e.data.id])).toEqual([
        ["task.processing", first],
        ["task.succeeded", first],
      ]);
      expect(page1.data[0]).toMatchObject({
        id: r.requests[0]!.headers["webhook-id"],
        delivery: { status: "succeeded", attempts: 1, last_status_code: 200 },
      });
      expect(page1.data[0].timestamp).toEqual(expect.any(String));

      res = await t.request(client.apiKey, `/openapi/v1/events?limit=2&after=${page1.next_cursor}`);
      const page2 = (await res.json()) as { data: any[]; next_cursor: string };
      expect(page2.data.map((e) => [e.type, e.data.id, e.delivery.status])).toEqual([
        ["task.succeeded", second, "none"],
      ]);

      res = await t.request(client.apiKey, `/openapi/v1/events?after=${page2.next_cursor}`);
      const page3 = (await res.json()) as { data: any[]; next_cursor: string };
      expect(page3).toEqual({ data: [], next_cursor: page2.next_cursor });

      res = await t.request(client.apiKey, "/openapi/v1/events?after=not-a-cursor");
      expect(res.status).toBe(400);
    });

    it("isolation: another client sees none of A's events, deliveries or redeliveries, and each receiver gets only its own client's", async () => {
      const { t, up } = await setup();
      const ra = await receiver();
      const rb = await receiver();
      const a = await t.client("a");
      const b = await t.client("b");
      const aTask = await finishedTask(t, up, a.apiKey, { callback_url: ra.url() });
      const bTask = await finishedTask(t, up, b.apiKey, { callback_url: rb.url() });
      await t.relay.dispatcher.runOnce();

      expect(ra.requests.map((x) => x.json.data.id)).toEqual([aTask]);
      expect(rb.requests.map((x) => x.json.data.id)).toEqual([bTask]);
      verifyAt(a.secret, ra.requests[0]!, t.clock.now());
      verifyAt(b.secret, rb.requests[0]!, t.clock.now());
      expect(() => verifyAt(b.secret, ra.requests[0]!, t.clock.now())).toThrow();

      const feed = (await (await t.request(b.apiKey, "/openapi/v1/events")).json()) as { data: any[] };
      expect(feed.data.map((e) => e.data.id)).toEqual([bTask]);

      for (const [method, path] of [
        ["GET", `/openapi/v1/tasks/${aTask}/deliveries`],
        ["POST", `/openapi/v1/tasks/${aTask}/redeliver`],
        ["GET", `/openapi/v1/tasks/${aTask}`],
      ] as const) {
        const res = await t.request(b.apiKey, path, { method });
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(await res.json()).toEqual({
          error: { code: "task_not_found", message: expect.any(String), request_id: expect.any(String) },
        });
      }
      await t.relay.dispatcher.runOnce();
      expect(ra.requests).toHaveLength(1);
    });

    it("POST /deliveries/recover re-queues the caller's failed deliveries since a time", async () => {
      const { t, up } = await setup({ WEBHOOK_RETRY_SCHEDULE: "0s" });
      const r = await receiver(status(500));
      const client = await t.client();
      const other = await t.client("other");
      const createdFrom = new Date(t.clock.now()).toISOString();
      const id = await finishedTask(t, up, client.apiKey, { callback_url: r.url() });
      await t.relay.dispatcher.runOnce();
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({ status: "failed", attempts: 1 });

      r.fallback = ok;
      t.clock.advance(60 * 60_000);
      const later = new Date(t.clock.now()).toISOString();
      let res = await t.request(client.apiKey, "/openapi/v1/deliveries/recover", {
        method: "POST",
        json: { since: later },
      });
      expect(res.status).toBe(202);
      expect(await res.json()).toEqual({ data: { requeued: 0 } });
      res = await t.request(other.apiKey, "/openapi/v1/deliveries/recover", {
        method: "POST",
        json: { since: createdFrom },
      });
      expect(await res.json()).toEqual({ data: { requeued: 0 } });

      res = await t.request(client.apiKey, "/openapi/v1/deliveries/recover", {
        method: "POST",
        json: { since: createdFrom },
      });
      expect(await res.json()).toEqual({ data: { requeued: 1 } });
      await t.relay.dispatcher.runOnce();

      expect(r.requests).toHaveLength(2);
      expect(r.requests[1]!.headers["webhook-id"]).toBe(r.requests[0]!.headers["webhook-id"]);
      expect(await deliveryOf(t, client.apiKey, id)).toMatchObject({
        status: "succeeded",
        attempts: 2,
        last_status_code: 200,
      });
    });
  });
});

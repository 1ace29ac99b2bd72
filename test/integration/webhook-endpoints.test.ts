import { describe, expect, it } from "vitest";
import { FakeUpstream } from "../helpers/fake-upstream.js";
import { createTask, succeededTask } from "../helpers/flow.js";
import { status, verifyAt, type Receiver } from "../helpers/receiver.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";
import { upstreamSuite, WORKER_TEST_ENV } from "../helpers/upstream-suite.js";

/**
 * Endpoints (docs/contract.md, "Endpoints"): a client's subscribed URLs, each its own destination of
 * every subscribed event of the client's tasks, under the same webhook-id, body and signature as the
 * task's callback. The store's side on both databases is store-conformance-webhook-endpoints.test.ts.
 */
const suite = upstreamSuite();
const PATH = "/openapi/v1/webhooks/endpoints";
/** Longer than every step of the suite's schedule (0s, 5s, 1m) with its jitter. */
const PAST_SCHEDULE = 2 * 60 * 60_000;

async function body(res: Response, expected: number): Promise<any> {
  const text = await res.text();
  expect(res.status, text).toBe(expected);
  return text ? JSON.parse(text) : null;
}

const createEndpoint = async (t: TestRelay, apiKey: string, json: unknown) =>
  (await body(await t.request(apiKey, PATH, { method: "POST", json }), 201)).data;

/** A task of the client that succeeds upstream and is polled: its event is written. */

async function failedTask(t: TestRelay, up: FakeUpstream, apiKey: string, extra: Record<string, unknown> = {}) {
  const id = await createTask(t, apiKey, extra);
  await t.relay.submitter.runOnce();
  up.set(up.taskOf(id)!.id, { status: "failed", error: { code: "content_policy", message: "refused" } });
  t.clock.advance(2_000);
  await t.relay.poller.runOnce();
  return id;
}

/** Runs the dispatcher until nothing is due, advancing the clock past every retry in between. */
async function deliverAll(t: TestRelay, rounds = 5) {
  for (let round = 0; round < rounds; round++) {
    await t.relay.dispatcher.runOnce();
    t.clock.advance(PAST_SCHEDULE);
  }
}

async function attempts(t: TestRelay, apiKey: string, id: string): Promise<any[]> {
  return (await body(await t.request(apiKey, `/openapi/v1/tasks/${id}/deliveries`), 200)).data;
}

const posts = (r: Receiver) => r.requests.filter((q) => q.method === "POST");

describe("the endpoints API", () => {
  it("create (201, the contract's fields, default events), list, read, delete (204), then 404", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const created = await createEndpoint(t, apiKey, {
      url: "https://hooks.example.com/n8n/1",
      description: "n8n: new image",
    });
    expect(Object.keys(created).sort()).toEqual(["created_at", "description", "events", "id", "url"]);
    expect(created).toMatchObject({
      url: "https://hooks.example.com/n8n/1",
      events: ["task.succeeded", "task.failed", "task.canceled"],
      description: "n8n: new image",
    });
    expect(created.id).toMatch(/^ep_[0-9a-z]+$/);
    expect(new Date(created.created_at).getTime()).toBe(t.clock.now());
    const second = await createEndpoint(t, apiKey, {
      url: "https://hooks.example.com/zap",
      events: ["task.processing", "task.failed", "task.failed"],
      headers: { "X-Zap-Token": "z-123" },
    });
    expect(second).toMatchObject({ events: ["task.processing", "task.failed"], description: null });
    expect(JSON.stringify(second)).not.toContain("z-123");
    expect((await body(await t.request(apiKey, PATH), 200)).data.map((e: any) => e.id)).toEqual([
      created.id,
      second.id,
    ]);
    expect((await body(await t.request(apiKey, `${PATH}/${created.id}`), 200)).data).toEqual(created);
    expect(await body(await t.request(apiKey, `${PATH}/${created.id}`, { method: "DELETE" }), 204)).toBeNull();
    expect((await body(await t.request(apiKey, `${PATH}/${created.id}`), 404)).error.code).toBe("not_found");
    expect((await body(await t.request(apiKey, `${PATH}/${created.id}`, { method: "DELETE" }), 404)).error.code).toBe(
      "not_found",
    );
    expect((await body(await t.request(apiKey, PATH), 200)).data.map((e: any) => e.id)).toEqual([second.id]);
  });

  it("refuses what the contract refuses: unknown events, reserved headers, unknown fields, a private URL, past the cap", async () => {
    const { t } = suite.setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const { apiKey } = t.client();
    const post = (json: unknown) => t.request(apiKey, PATH, { method: "POST", json });
    const url = "https://hooks.example.com/x";
    expect((await body(await post({ url, events: ["task.created"] }), 422)).error.code).toBe("validation_error");
    expect((await body(await post({ url, events: [] }), 422)).error.code).toBe("validation_error");
    expect((await body(await post({ url, headers: { "Webhook-Id": "x" } }), 422)).error.code).toBe("validation_error");
    expect((await body(await post({ url, description: "d".repeat(501) }), 422)).error.code).toBe("validation_error");
    expect(JSON.stringify((await body(await post({ url, evnets: ["task.failed"] }), 422)).error)).toContain("events");
    expect((await body(await post({ url: "http://127.0.0.1:9/hook" }), 400)).error.code).toBe("invalid_callback_url");
    expect((await body(await post({ url: "ftp://hooks.example.com/x" }), 400)).error.code).toBe("invalid_callback_url");
    for (let i = 0; i < 20; i++) await createEndpoint(t, apiKey, { url: `${url}/${i}` });
    expect((await body(await post({ url }), 422)).error.message).toContain("at most 20");
    expect((await body(await t.request(null, PATH), 401)).error.code).toBe("invalid_api_key");
  });

  it("tenant isolation: another client cannot read, delete, list or receive a client's endpoint", async () => {
    const { t, up } = suite.setup();
    const a = t.client("a");
    const b = t.client("b");
    const hook = await suite.receiver();
    const ep = await createEndpoint(t, a.apiKey, { url: hook.url("/a") });
    expect((await body(await t.request(b.apiKey, `${PATH}/${ep.id}`), 404)).error.code).toBe("not_found");
    expect((await body(await t.request(b.apiKey, `${PATH}/${ep.id}`, { method: "DELETE" }), 404)).error.code).toBe(
      "not_found",
    );
    expect((await body(await t.request(b.apiKey, PATH), 200)).data).toEqual([]);
    // B's task, with no callback_url: B has no endpoint, and A's never hears of it.
    await succeededTask(t, up, b.apiKey);
    await deliverAll(t);
    expect(posts(hook)).toEqual([]);
    // A's own task reaches it: the endpoint still exists.
    await succeededTask(t, up, a.apiKey);
    await deliverAll(t);
    expect(posts(hook)).toHaveLength(1);
  });
});

describe("delivery to endpoints", () => {
  it("one event to the callback and two endpoints: one webhook-id, the same body and signature, each with its own headers", async () => {
    const { t, up } = suite.setup();
    const { apiKey, secret } = t.client();
    const cb = await suite.receiver();
    const one = await suite.receiver();
    const two = await suite.receiver();
    const e1 = await createEndpoint(t, apiKey, { url: one.url("/one"), headers: { "X-Token": "one-token" } });
    const e2 = await createEndpoint(t, apiKey, { url: two.url("/two") });
    const id = await succeededTask(t, up, apiKey, { callback_url: cb.url("/cb") });
    await t.relay.dispatcher.runOnce();
    const [c] = posts(cb);
    const [x] = posts(one);
    const [y] = posts(two);
    expect([c, x, y].every(Boolean)).toBe(true);
    for (const r of [x!, y!]) {
      expect(r.headers["webhook-id"]).toBe(c!.headers["webhook-id"]);
      expect(r.body).toBe(c!.body);
      expect(r.headers["webhook-signature"]).toBe(c!.headers["webhook-signature"]);
      expect(verifyAt(secret, r, t.clock.now())).toMatchObject({ type: "task.succeeded", data: { id } });
    }
    expect(c!.json).toMatchObject({ id: c!.headers["webhook-id"] });
    expect(x!.headers["x-token"]).toBe("one-token");
    expect(y!.headers["x-token"]).toBeUndefined();
    // The attempt log says where each went, under the one event id.
    const log = await attempts(t, apiKey, id);
    expect(log.map((a) => [a.destination, a.event_id, a.outcome]).sort()).toEqual(
      [
        ["callback", c!.headers["webhook-id"], "succeeded"],
        [e1.id, c!.headers["webhook-id"], "succeeded"],
        [e2.id, c!.headers["webhook-id"], "succeeded"],
      ].sort(),
    );
    // The feed lists the event once, with its callback's delivery and each endpoint's.
    const feed = (await body(await t.request(apiKey, "/openapi/v1/events"), 200)).data;
    expect(feed.map((e: any) => e.id)).toEqual([c!.headers["webhook-id"]]);
    expect(feed[0].delivery).toEqual({ status: "succeeded", attempts: 1, last_status_code: 200 });
    expect(feed[0].endpoints).toEqual([
      { endpoint_id: e1.id, status: "succeeded", attempts: 1, last_status_code: 200 },
      { endpoint_id: e2.id, status: "succeeded", attempts: 1, last_status_code: 200 },
    ]);
  });

  it("event filters: an endpoint gets only the types it subscribes to", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const failures = await suite.receiver();
    const all = await suite.receiver();
    await createEndpoint(t, apiKey, { url: failures.url("/f"), events: ["task.failed"] });
    await createEndpoint(t, apiKey, { url: all.url("/all") });
    await succeededTask(t, up, apiKey);
    await failedTask(t, up, apiKey);
    await deliverAll(t);
    expect(posts(failures).map((r) => r.json.type)).toEqual(["task.failed"]);
    expect(
      posts(all)
        .map((r) => r.json.type)
        .sort(),
    ).toEqual(["task.failed", "task.succeeded"]);
  });

  it("an endpoint subscribed to task.processing gets it though the task's callback did not ask for it; the callback does not", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const cb = await suite.receiver();
    const hook = await suite.receiver();
    await createEndpoint(t, apiKey, { url: hook.url("/p"), events: ["task.processing", "task.succeeded"] });
    const id = await createTask(t, apiKey, { callback_url: cb.url("/cb") });
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "processing" });
    t.clock.advance(2_000);
    await t.relay.poller.runOnce();
    up.set(up.taskOf(id)!.id, {
      status: "succeeded",
      output: { images: [{ url: "https://cdn.test/fox.png" }] },
      usage: { points_charged: 20, points_refunded: 0 },
    });
    t.clock.advance(20_000);
    await t.relay.poller.runOnce();
    await deliverAll(t);
    expect(posts(hook).map((r) => r.json.type)).toEqual(["task.processing", "task.succeeded"]);
    expect(posts(cb).map((r) => r.json.type)).toEqual(["task.succeeded"]);
  });

  it("a task without callback_url is delivered to the client's endpoint", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const hook = await suite.receiver();
    await createEndpoint(t, apiKey, { url: hook.url() });
    const id = await succeededTask(t, up, apiKey);
    await t.relay.dispatcher.runOnce();
    expect(posts(hook).map((r) => r.json.data.id)).toEqual([id]);
  });

  it("the address guard applies to an endpoint at delivery too: a public name that resolves to a private address is blocked", async () => {
    const t = createTestRelay(
      { ...WORKER_TEST_ENV, WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" },
      { resolve: async () => [{ address: "10.0.0.7", family: 4 }] },
    );
    suite.cleanup(() => t.close());
    suite.server.use(...new FakeUpstream(t.clock).handlers());
    const { apiKey } = t.client();
    const ep = await createEndpoint(t, apiKey, { url: "https://hooks.example.com/rebound" });
    const id = await createTask(t, apiKey);
    await body(await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" }), 200);
    await t.relay.dispatcher.runOnce();
    const log = await attempts(t, apiKey, id);
    expect(log.map((a) => [a.destination, a.outcome])).toEqual([[ep.id, "blocked"]]);
    expect(log[0].error).toMatch(/10\.0\.0\.7|private|not allowed/i);
  });

  it("redeliver sends the last event again to the callback and to each endpoint it went to, under the same webhook-id", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const hook = await suite.receiver();
    const cb = await suite.receiver();
    await createEndpoint(t, apiKey, { url: hook.url("/ep") });
    // A task without callback_url: redelivered to its endpoint alone.
    const alone = await succeededTask(t, up, apiKey);
    await t.relay.dispatcher.runOnce();
    const first = posts(hook)[0]!;
    t.clock.advance(60_000);
    const res = await body(await t.request(apiKey, `/openapi/v1/tasks/${alone}/redeliver`, { method: "POST" }), 202);
    expect(res.data).toEqual({
      event_id: first.headers["webhook-id"],
      event_type: "task.succeeded",
      status: "pending",
    });
    await t.relay.dispatcher.runOnce();
    expect(posts(hook).map((r) => r.headers["webhook-id"])).toEqual([
      first.headers["webhook-id"]!,
      first.headers["webhook-id"]!,
    ]);
    expect(posts(hook)[1]!.body).toBe(first.body);
    // With a callback too: both get it again.
    const both = await succeededTask(t, up, apiKey, { callback_url: cb.url("/cb") });
    await t.relay.dispatcher.runOnce();
    t.clock.advance(60_000);
    await body(await t.request(apiKey, `/openapi/v1/tasks/${both}/redeliver`, { method: "POST" }), 202);
    await t.relay.dispatcher.runOnce();
    expect(posts(cb)).toHaveLength(2);
    expect(posts(hook).filter((r) => r.json.data.id === both)).toHaveLength(2);
    // A task with neither is refused, as before.
    const { apiKey: lone } = t.client("lone");
    const none = await succeededTask(t, up, lone);
    expect(
      (await body(await t.request(lone, `/openapi/v1/tasks/${none}/redeliver`, { method: "POST" }), 400)).error.code,
    ).toBe("invalid_request");
  });

  it("deleting an endpoint stops its pending deliveries; delivered history stays in the attempt log", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const hook = await suite.receiver(status(503));
    const ep = await createEndpoint(t, apiKey, { url: hook.url() });
    const id = await succeededTask(t, up, apiKey);
    await t.relay.dispatcher.runOnce();
    expect(posts(hook)).toHaveLength(1);
    await body(await t.request(apiKey, `${PATH}/${ep.id}`, { method: "DELETE" }), 204);
    await deliverAll(t);
    expect(posts(hook)).toHaveLength(1);
    const log = await attempts(t, apiKey, id);
    expect(log.map((a) => [a.destination, a.status_code])).toEqual([[ep.id, 503]]);
  });

  it("an endpoint deleted while its attempt is in flight: the feed counts the attempt the log lists", async () => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const hook = await suite.receiver();
    let answer = () => {};
    hook.answers.push((_req, res) => {
      answer = () => status(503)(_req, res);
    });
    const ep = await createEndpoint(t, apiKey, { url: hook.url() });
    const id = await succeededTask(t, up, apiKey);
    const arrived = hook.next();
    const running = t.relay.dispatcher.runOnce();
    await arrived;
    await body(await t.request(apiKey, `${PATH}/${ep.id}`, { method: "DELETE" }), 204);
    answer();
    await running;
    await deliverAll(t);
    const log = await attempts(t, apiKey, id);
    expect(log.map((a) => [a.destination, a.status_code])).toEqual([[ep.id, 503]]);
    const feed = (await body(await t.request(apiKey, "/openapi/v1/events"), 200)).data;
    expect(feed.map((e: any) => e.endpoints)).toEqual([
      [{ endpoint_id: ep.id, status: "ended", attempts: 1, last_status_code: null }],
    ]);
  });

  it.each([
    ["410 Gone", status(410)],
    ["webhook-delivery: abort", status(500, { "webhook-delivery": "abort" })],
  ])("%s from one endpoint ends only that destination's retries", async (_name, stop) => {
    const { t, up } = suite.setup();
    const { apiKey } = t.client();
    const cb = await suite.receiver();
    const stopping = await suite.receiver(stop);
    const flaky = await suite.receiver();
    flaky.answers.push(status(500), status(500));
    const stopped = await createEndpoint(t, apiKey, { url: stopping.url("/stop") });
    const retried = await createEndpoint(t, apiKey, { url: flaky.url("/flaky") });
    const id = await succeededTask(t, up, apiKey, { callback_url: cb.url("/cb") });
    await deliverAll(t);
    expect(posts(stopping)).toHaveLength(1);
    expect(posts(flaky)).toHaveLength(3);
    expect(posts(cb)).toHaveLength(1);
    const log = await attempts(t, apiKey, id);
    const of = (d: string) => log.filter((a) => a.destination === d);
    expect(of(stopped.id).map((a) => a.error)).toEqual([
      expect.stringMatching(/receiver asked for no more deliveries/),
    ]);
    expect(of(retried.id).map((a) => a.outcome)).toEqual(["failed", "failed", "succeeded"]);
    expect(of("callback").map((a) => a.outcome)).toEqual(["succeeded"]);
  });
});

describe("a sample sent to one of the client's endpoints (issue #39)", () => {
  it("carries that endpoint's headers, as its real deliveries do; another URL gets none", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const r = await suite.receiver();
    const created = await t.request(apiKey, "/openapi/v1/webhooks/endpoints", {
      method: "POST",
      json: { url: r.url(), headers: { "X-Hook-Token": "catch-hook-token-7" } },
    });
    expect(created.status).toBe(201);

    const toEndpoint = r.next();
    const sent = await t.request(apiKey, "/openapi/v1/webhooks/test", {
      method: "POST",
      json: { url: r.url(), type: "task.succeeded" },
    });
    expect(sent.status).toBe(200);
    expect((await toEndpoint).headers["x-hook-token"]).toBe("catch-hook-token-7");

    const other = await suite.receiver();
    const toOther = other.next();
    await t.request(apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: other.url() } });
    expect((await toOther).headers).not.toHaveProperty("x-hook-token");
  });
});

import { Writable } from "node:stream";
import { describe, expect, it, vi } from "vitest";
import { createLogger, type Logger } from "../../src/logger.js";
import { openStream, STREAM_PLACE_MS, STREAM_RENEW_MS, STREAMS_PER_CLIENT } from "../../src/services/streams.js";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import { createTask } from "../helpers/flow.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";
import { expectTooManyStreams, type SseEvent, SseReader } from "../helpers/sse.js";

/**
 * Live progress (docs/contract.md, "Live progress"): a task's events as server-sent events, woken
 * by its transitions, ended after the terminal one; a reconnect with Last-Event-ID misses and
 * repeats nothing; the client's whole feed as a stream; a bounded number per API key.
 */
const suite = upstreamSuite({});
const setup = (env: Record<string, string> = {}, opts: { logger?: Logger } = {}) => suite.setup(env, opts);

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const ALL_EVENTS = ["task.processing", "task.succeeded", "task.failed", "task.canceled"];

async function stream(t: TestRelay, apiKey: string | null, path: string, headers: Record<string, string> = {}) {
  const res = await t.request(apiKey, path, { headers });
  if (res.status !== 200) throw new Error(`${res.status} ${await res.text()}`);
  expect(res.headers.get("content-type")).toBe("text/event-stream");
  const reader = new SseReader(res);
  suite.cleanup(() => reader.cancel());
  return reader;
}

/** The feed's items as the stream shows them: the webhook body, without the feed's delivery state. */
async function feed(t: TestRelay, apiKey: string): Promise<SseEvent[]> {
  const body = (await (await t.request(apiKey, "/openapi/v1/events?limit=100")).json()) as Json;
  return body.data.map(({ delivery: _d, endpoints: _e, ...event }: Json) => ({
    id: event.id,
    event: event.type,
    data: event,
  }));
}
const parsed = (events: SseEvent[]) => events.map((e) => ({ ...e, data: JSON.parse(e.data) }));
const stored = (events: SseEvent[]) => events.filter((e) => e.event !== "task.progress");

/** Submits, then plays the upstream's task through `statuses`, one poll each. */
async function play(t: TestRelay, up: FakeUpstream, id: string, statuses: Array<Parameters<FakeUpstream["set"]>[1]>) {
  await t.relay.submitter.runOnce();
  for (const patch of statuses) {
    up.set(up.taskOf(id)!.id, patch);
    t.clock.advance(6_000);
    await t.relay.poller.runOnce();
  }
}

describe("GET /openapi/v1/tasks/{id}/events", () => {
  it("streams every event in order, with progress, and ends after task.succeeded", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_events: ALL_EVENTS });
    const s = await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`);
    const first = await s.next();
    expect(first).toEqual({ event: "task.progress", data: expect.any(String) });
    expect(JSON.parse(first!.data)).toEqual({
      type: "task.progress",
      timestamp: new Date(t.clock.now()).toISOString(),
      data: { id, status: "queued", queue_position: 1, estimated_completion_at: null },
    });
    await play(t, up, id, [{ status: "processing" }, { status: "succeeded", output: { images: ["https://x/1.png"] } }]);
    const rest = await s.rest();
    expect(s.ended).toBe(true);
    expect(rest.at(-1)?.event).toBe("task.succeeded");
    expect(parsed(stored(rest))).toEqual(await feed(t, apiKey));
    expect(stored(rest).map((e) => e.event)).toEqual(["task.processing", "task.succeeded"]);
    expect(t.relay.streams.size).toBe(0);
  });

  it("ends after task.failed", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const s = await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`);
    await play(t, up, id, [{ status: "failed", error: { code: "content_policy", message: "refused" } }]);
    const events = stored(await s.rest());
    expect(events.map((e) => e.event)).toEqual(["task.failed"]);
    expect(JSON.parse(events[0]!.data).data).toMatchObject({ id, status: "failed", error: { code: "content_policy" } });
  });

  it("ends after a cancel, and after an expiry (task.canceled, error.code expired)", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const canceled = await createTask(t, apiKey);
    const expiring = await createTask(t, apiKey, { expires_after_seconds: 5 });
    const a = await stream(t, apiKey, `/openapi/v1/tasks/${canceled}/events`);
    const b = await stream(t, apiKey, `/openapi/v1/tasks/${expiring}/events`);
    await vi.waitFor(() => expect(t.relay.streams.watchers({ task: expiring })).toBe(1));
    expect((await t.request(apiKey, `/openapi/v1/tasks/${canceled}/cancel`, { method: "POST" })).status).toBe(200);
    const ended = stored(await a.rest());
    expect(ended.map((e) => e.event)).toEqual(["task.canceled"]);
    t.clock.advance(5_000);
    await t.relay.submitter.runOnce();
    const expired = stored(await b.rest());
    expect(expired.map((e) => e.event)).toEqual(["task.canceled"]);
    expect(JSON.parse(expired[0]!.data).data.error).toMatchObject({ code: "expired" });
  });

  it("a task already ended: its events at once, then the end", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    const events = await (await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`)).rest();
    expect(parsed(events)).toEqual(await feed(t, apiKey));
  });

  it("a reconnect with Last-Event-ID misses and repeats nothing", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_events: ALL_EVENTS });
    const first = await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`);
    await play(t, up, id, [{ status: "processing" }]);
    let processing: SseEvent | null = null;
    while (processing?.event !== "task.processing") processing = await first.next();
    await first.cancel();
    await vi.waitFor(() => expect(t.relay.streams.size).toBe(0));
    // While no one listens, the task ends.
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: { images: ["https://x/1.png"] } });
    t.clock.advance(6_000);
    await t.relay.poller.runOnce();
    const again = stored(
      await (await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`, { "Last-Event-ID": processing.id! })).rest(),
    );
    expect([processing, ...again].map((e) => e.event)).toEqual(["task.processing", "task.succeeded"]);
    expect(parsed([processing, ...again])).toEqual(await feed(t, apiKey));
  });

  it("refuses a Last-Event-ID of another task, and another client's task", async () => {
    const { t } = setup();
    const a = t.client("a");
    const b = t.client("b");
    const one = await createTask(t, a.apiKey);
    const two = await createTask(t, a.apiKey);
    await t.request(a.apiKey, `/openapi/v1/tasks/${one}/cancel`, { method: "POST" });
    const [event] = await (await stream(t, a.apiKey, `/openapi/v1/tasks/${one}/events`)).rest();
    const wrong = await t.request(a.apiKey, `/openapi/v1/tasks/${two}/events`, {
      headers: { "Last-Event-ID": event!.id! },
    });
    expect(wrong.status).toBe(400);
    expect(await wrong.json()).toEqual({
      error: {
        code: "invalid_request",
        message: "Last-Event-ID is not the id of an event of this stream.",
        request_id: expect.stringMatching(/^req_/),
        details: [{ field: "Last-Event-ID", message: "unknown event id" }],
      },
    });
    const foreign = await t.request(b.apiKey, `/openapi/v1/tasks/${one}/events`);
    expect(foreign.status).toBe(404);
    expect(((await foreign.json()) as Json).error.code).toBe("task_not_found");
    expect(t.relay.streams.size).toBe(0);
  });
});

describe("GET /openapi/v1/events/stream", () => {
  it("streams the client's events from a feed position, and resumes after Last-Event-ID", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const other = t.client("other");
    const before = await createTask(t, apiKey);
    await t.request(apiKey, `/openapi/v1/tasks/${before}/cancel`, { method: "POST" });
    const page = (await (await t.request(apiKey, "/openapi/v1/events")).json()) as Json;
    // From the feed's cursor: only what comes after it.
    const live = await stream(t, apiKey, `/openapi/v1/events/stream?after=${page.next_cursor}`);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await createTask(t, apiKey));
    const foreign = await createTask(t, other.apiKey);
    await t.request(other.apiKey, `/openapi/v1/tasks/${foreign}/cancel`, { method: "POST" });
    await t.request(apiKey, `/openapi/v1/tasks/${ids[0]}/cancel`, { method: "POST" });
    const first = (await live.next())!;
    await live.cancel();
    for (const id of ids.slice(1)) await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    const resumed = await stream(t, apiKey, "/openapi/v1/events/stream", { "Last-Event-ID": first.id! });
    const got = [first, (await resumed.next())!, (await resumed.next())!];
    expect(got.map((e) => JSON.parse(e.data).data.id)).toEqual(ids);
    expect(parsed(got)).toEqual((await feed(t, apiKey)).slice(1));
    // From the start of the feed with the feed's own first cursor semantics (after nothing).
    const all = await stream(t, apiKey, `/openapi/v1/events/stream?after=${Buffer.from("c0").toString("base64url")}`);
    const replay = [];
    for (let i = 0; i < 4; i++) replay.push((await all.next())!);
    expect(parsed(replay)).toEqual(await feed(t, apiKey));
  });
});

describe("limits and shutdown", () => {
  it(`holds at most ${STREAMS_PER_CLIENT} streams per API key: one more gets 429 with Retry-After`, async () => {
    const { t } = setup();
    const flooder = t.client("flooder");
    const other = t.client("other");
    const id = await createTask(t, flooder.apiKey);
    for (let i = 0; i < STREAMS_PER_CLIENT; i++) await stream(t, flooder.apiKey, `/openapi/v1/tasks/${id}/events`);
    const refused = await t.request(flooder.apiKey, "/openapi/v1/events/stream");
    await expectTooManyStreams(refused);
    await stream(t, other.apiKey, "/openapi/v1/events/stream");
    expect(t.relay.streams.ofClient(flooder.id)).toBe(STREAMS_PER_CLIENT);
  });

  it("an open stream's place in the store is renewed on its heartbeat and given back when it ends", async () => {
    const { t } = setup();
    const { id } = t.client();
    const fired: Array<() => void> = [];
    const timers = { set: (fire: () => void) => fired.push(fire), clear: () => {} };
    const hub = t.relay.streams;
    const limited = async () =>
      (await t.store.limits.take(id, "open_stream", t.clock.now(), 1, STREAM_PLACE_MS)).allowed;
    const sub = await openStream(t.relay.deps, hub, id, timers);
    // Its place counts: with a bound of one, nothing else fits.
    expect(await limited()).toBe(false);
    // Without a heartbeat it would stop counting after STREAM_PLACE_MS; the heartbeat moves it forward.
    t.clock.advance(STREAM_RENEW_MS);
    fired.shift()!();
    await vi.waitFor(() => expect(fired).toHaveLength(1));
    t.clock.advance(STREAM_PLACE_MS - STREAM_RENEW_MS);
    expect(await limited()).toBe(false);
    await sub.release();
    expect(await limited()).toBe(true);
  });

  it("stop ends every stream at once (SIGTERM)", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const a = await stream(t, apiKey, `/openapi/v1/tasks/${id}/events`);
    const b = await stream(t, apiKey, "/openapi/v1/events/stream");
    await vi.waitFor(() => expect(t.relay.streams.watchers({ task: id })).toBe(1));
    t.relay.releaseWaits();
    await a.rest();
    await b.rest();
    expect(t.relay.streams.size).toBe(0);
    const late = await t.request(apiKey, "/openapi/v1/events/stream");
    expect(late.status).toBe(503);
  });
});

describe("browser access: stream tokens and CORS", () => {
  const refusedBody = {
    error: {
      code: "invalid_api_key",
      message: "The stream token is unknown, expired, or reads another task's stream.",
      request_id: expect.stringMatching(/^req_/),
    },
  };

  it("a token reads its task's stream without a key for 15 minutes, and no other task's; it is never logged", async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const { t } = setup({}, { logger: createLogger("info", sink) });
    const { apiKey } = t.client();
    const other = t.client("other");
    const id = await createTask(t, apiKey);
    const second = await createTask(t, apiKey);
    const created = await t.request(apiKey, `/openapi/v1/tasks/${id}/stream-tokens`, { method: "POST" });
    expect(created.status).toBe(201);
    const { data } = (await created.json()) as Json;
    expect(data).toEqual({
      token: expect.stringMatching(/^gst_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/),
      expires_at: new Date(t.clock.now() + 15 * 60_000).toISOString(),
      url: `http://relay.test/openapi/v1/tasks/${id}/events?token=${data.token}`,
    });
    const path = (task: string, token = data.token as string) => `/openapi/v1/tasks/${task}/events?token=${token}`;

    await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    const events = stored(await (await stream(t, null, path(id))).rest());
    expect(events.map((e) => e.event)).toEqual(["task.canceled"]);

    for (const [label, res] of [
      ["another task", await t.request(null, path(second))],
      [
        "a token changed by one character",
        await t.request(null, path(id, `${data.token.slice(0, -1)}${data.token.endsWith("A") ? "B" : "A"}`)),
      ],
      ["no token at all", await t.request(null, path(id, ""))],
    ] as const) {
      expect(res.status, label).toBe(401);
      expect(await res.json(), label).toEqual(refusedBody);
    }
    // Another client's task: no token for it.
    const foreign = await t.request(other.apiKey, `/openapi/v1/tasks/${id}/stream-tokens`, { method: "POST" });
    expect(foreign.status).toBe(404);
    // A token reads nothing else: not the client's feed stream, not a task read.
    expect((await t.request(null, `/openapi/v1/events/stream?token=${data.token}`)).status).toBe(401);
    expect((await t.request(null, `/openapi/v1/tasks/${id}?token=${data.token}`)).status).toBe(401);

    t.clock.advance(15 * 60_000);
    const expired = await t.request(null, path(id));
    expect(expired.status).toBe(401);
    expect(await expired.json()).toEqual(refusedBody);

    const logged = lines.join("");
    expect(logged).toContain(`/openapi/v1/tasks/${id}/events`);
    expect(logged).not.toContain(data.token.slice(4, 40));
  });

  it("CORS on the stream routes only, for the configured origins", async () => {
    const { t } = setup({ STREAM_CORS_ORIGINS: "https://app.example.com" });
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const { data } = (await (
      await t.request(apiKey, `/openapi/v1/tasks/${id}/stream-tokens`, { method: "POST" })
    ).json()) as Json;
    const allowed = await t.request(null, `/openapi/v1/tasks/${id}/events?token=${data.token}`, {
      headers: { Origin: "https://app.example.com" },
    });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    await allowed.body?.cancel();
    const stranger = await t.request(null, `/openapi/v1/tasks/${id}/events?token=${data.token}`, {
      headers: { Origin: "https://evil.example" },
    });
    expect(stranger.headers.get("access-control-allow-origin")).toBeNull();
    await stranger.body?.cancel();
    const preflight = await t.request(null, "/openapi/v1/events/stream", {
      method: "OPTIONS",
      headers: {
        Origin: "https://app.example.com",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    expect(preflight.headers.get("access-control-allow-headers")).toBe("Authorization,Last-Event-ID");
    // Every other route: no CORS.
    const read = await t.request(apiKey, `/openapi/v1/tasks/${id}`, { headers: { Origin: "https://app.example.com" } });
    expect(read.headers.get("access-control-allow-origin")).toBeNull();
    // Without STREAM_CORS_ORIGINS, none at all.
    const { t: plain } = setup();
    const key = plain.client().apiKey;
    const res = await plain.request(key, "/openapi/v1/events/stream", {
      headers: { Origin: "https://app.example.com" },
    });
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    await res.body?.cancel();
  });
});

describe("the creation's 201 (#39)", () => {
  it("carries estimated_completion_at once the model's median is known, as a read a moment later does", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const create = () =>
      t.request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        json: { model: "p-image", mode: "generate", prompt: "a red fox in snow", count: 1 },
        idempotencyKey: `eta-${Math.random().toString(36).slice(2, 12)}`,
      });
    const unknown = (await (await create()).json()) as Json;
    expect(unknown.data.estimated_completion_at).toBeNull();
    await t.store.accounts.saveDurationSamples("image", "p-image", [8_000, 10_000, 30_000], t.clock.now());
    const res = await create();
    expect(res.status).toBe(201);
    const created = (await res.json()) as Json;
    // Second in the account's queue, whose concurrency is not limited: one median from now.
    expect(created.data.queue_position).toBe(2);
    expect(created.data.estimated_completion_at).toBe(new Date(t.clock.now() + 10_000).toISOString());
    const read = (await (await t.request(apiKey, `/openapi/v1/tasks/${created.data.id}`)).json()) as Json;
    expect(created.data.estimated_completion_at).toBe(read.data.estimated_completion_at);
    expect(created.data.queue_position).toBe(read.data.queue_position);
  });
});

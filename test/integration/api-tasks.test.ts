import fc from "fast-check";
import { http, HttpResponse } from "msw";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { revokeClient } from "../../src/services/clients.js";
import {
  imageBody,
  relayDialects,
  UPSTREAM_KEY,
  UPSTREAM_URL,
  videoBody,
  type DialectRelay,
  relayPerBlock,
  relayPerTest,
} from "../helpers/relay.js";
import { mswServer } from "../helpers/upstream-suite.js";

const server = mswServer();

/** The relay of the running test (or, in the authorisation matrix, of the matrix), on the dialect its block runs on. */
let t: DialectRelay;
const dialects = relayDialects();
const useRelay = (r: DialectRelay) => {
  t = r;
};

const requestId = expect.stringMatching(/^req_/);
const NOW = "2026-01-01T12:00:00.000Z";
const errorBody = (code: string) => ({ error: { code, message: expect.any(String), request_id: requestId } });

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function create(
  apiKey: string,
  kind: "image" | "video" = "image",
  extra: Record<string, unknown> = {},
  key?: string,
): Promise<Json> {
  const res = await t.request(
    apiKey,
    kind === "image" ? "/openapi/v1/images/generations" : "/openapi/v1/videos/generations",
    {
      method: "POST",
      idempotencyKey: key ?? `key-${Math.random().toString(36).slice(2, 12)}`,
      json: kind === "image" ? imageBody(extra) : videoBody(extra),
    },
  );
  expect(res.status).toBe(201);
  return (await res.json()) as Json;
}

async function get(
  apiKey: string | null,
  path: string,
  init: Parameters<DialectRelay["request"]>[2] = {},
): Promise<{ status: number; json: Json; res: Response }> {
  const res = await t.request(apiKey, path, init);
  return { status: res.status, json: (await res.json()) as Json, res };
}

/** Counts every request that reaches the upstream. */
function countUpstream(
  respond: (req: Request) => Response | Promise<Response> = () =>
    HttpResponse.json({ error: { code: "internal_error" } }, { status: 500 }),
) {
  const calls: string[] = [];
  server.use(
    http.all(`${UPSTREAM_URL}/*`, ({ request }) => {
      calls.push(`${request.method} ${new URL(request.url).pathname}`);
      return respond(request);
    }),
  );
  return calls;
}

/** Every /openapi/v1 route, with a request that would otherwise be valid enough to reach its handler. */
const ROUTES: {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  init?: { json?: unknown; idempotencyKey?: string };
}[] = [
  {
    method: "POST",
    path: "/openapi/v1/images/generations",
    init: { json: imageBody(), idempotencyKey: "matrix-key-1" },
  },
  {
    method: "POST",
    path: "/openapi/v1/videos/generations",
    init: { json: videoBody(), idempotencyKey: "matrix-key-2" },
  },
  { method: "GET", path: "/openapi/v1/tasks" },
  { method: "GET", path: "/openapi/v1/tasks/{id}" },
  { method: "POST", path: "/openapi/v1/tasks/{id}/cancel" },
  { method: "GET", path: "/openapi/v1/tasks/{id}/deliveries" },
  { method: "POST", path: "/openapi/v1/tasks/{id}/redeliver" },
  { method: "GET", path: "/openapi/v1/models" },
  { method: "GET", path: "/openapi/v1/events" },
  { method: "GET", path: "/openapi/v1/tasks/{id}/events" },
  { method: "POST", path: "/openapi/v1/tasks/{id}/stream-tokens" },
  { method: "GET", path: "/openapi/v1/events/stream" },
  { method: "GET", path: "/openapi/v1/usage" },
  { method: "POST", path: "/openapi/v1/webhooks/test", init: { json: { url: "https://10.0.0.1/hook" } } },
  { method: "POST", path: "/openapi/v1/webhooks/secret/rotate" },
  { method: "POST", path: "/openapi/v1/deliveries/recover", init: { json: { since: "2025-12-31T00:00:00Z" } } },
  { method: "GET", path: "/openapi/v1/webhooks/hosts" },
  { method: "POST", path: "/openapi/v1/webhooks/hosts/{host}/retry" },
  { method: "GET", path: "/openapi/v1/webhooks/settings" },
  {
    method: "POST",
    path: "/openapi/v1/webhooks/endpoints",
    init: { json: { url: "https://hooks.example.com/endpoint" } },
  },
  { method: "GET", path: "/openapi/v1/webhooks/endpoints" },
  { method: "GET", path: "/openapi/v1/webhooks/endpoints/{id}" },
  { method: "DELETE", path: "/openapi/v1/webhooks/endpoints/{id}" },
  { method: "PUT", path: "/openapi/v1/webhooks/settings", init: { json: {} } },
  { method: "GET", path: "/openapi/v1/storage" },
  { method: "PUT", path: "/openapi/v1/storage", init: { json: {} } },
  { method: "DELETE", path: "/openapi/v1/storage" },
];

/** The /openapi/v1 routes that take no API key (docs/contract.md, "Published keys"): any credential is ignored. */
const PUBLIC_ROUTES: typeof ROUTES = [{ method: "GET", path: "/openapi/v1/webhooks/jwks/{client_id}" }];

type Credential = (ctx: { valid: string; revoked: string }) => Record<string, string>;
const CREDENTIALS: [string, Credential][] = [
  ["no Authorization header", () => ({})],
  ["an empty Authorization header", () => ({ Authorization: "" })],
  ["Bearer without a token", () => ({ Authorization: "Bearer" })],
  ["Bearer and a space only", () => ({ Authorization: "Bearer " })],
  ["the valid key without the Bearer scheme", ({ valid }) => ({ Authorization: valid })],
  ["the valid key under the Basic scheme", ({ valid }) => ({ Authorization: `Basic ${valid}` })],
  ["the valid key followed by another token", ({ valid }) => ({ Authorization: `Bearer ${valid} ${valid}` })],
  ["the valid key with a character added", ({ valid }) => ({ Authorization: `Bearer ${valid}x` })],
  ["the valid key truncated", ({ valid }) => ({ Authorization: `Bearer ${valid.slice(0, -1)}` })],
  ["an unknown grk_ key", () => ({ Authorization: `Bearer grk_${"A".repeat(43)}` })],
  ["an upstream-style key", () => ({ Authorization: `Bearer ${UPSTREAM_KEY}` })],
  ["a revoked key", ({ revoked }) => ({ Authorization: `Bearer ${revoked}` })],
  ["the valid key in X-Api-Key instead", ({ valid }) => ({ "X-Api-Key": valid })],
];

describe.each(dialects)("on %s", (_dialect, open) => {
  describe("GET /openapi/v1/tasks/{id}", () => {
    relayPerTest(open, useRelay);
    it('shows a waiting task exactly as docs/contract.md, "Reading tasks" describes', async () => {
      const { apiKey } = await t.client();
      const created = await create(apiKey, "video", {
        callback_url: "https://hooks.example.com/h",
        callback_events: ["task.succeeded"],
        metadata: { order: "7" },
      });
      const { status, json, res } = await get(apiKey, `/openapi/v1/tasks/${created.data.id}`);
      expect(status).toBe(200);
      expect(res.headers.get("x-request-id")).toMatch(/^req_/);
      expect(json).toEqual({
        data: {
          id: created.data.id,
          type: "video",
          status: "queued",
          model: "v-video",
          created_at: NOW,
          updated_at: NOW,
          completed_at: null,
          upstream_task_id: null,
          error: null,
          metadata: { order: "7" },
          callback: {
            url: "https://hooks.example.com/h",
            events: ["task.succeeded"],
            delivery: { status: "none", attempts: 0, last_attempt_at: null, last_status_code: null },
          },
          queue_position: 1,
          estimated_completion_at: null,
        },
        output: null,
        usage: { points_charged: null, points_refunded: null },
      });
    });

    it("shows a finished task with the upstream output verbatim and its usage", async () => {
      const { apiKey } = await t.client();
      const output = { images: [{ url: "https://cdn.example.com/1.png", width: 1024 }], extra: { kept: true } };
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, () =>
          HttpResponse.json(
            { data: { id: "up_42", status: "succeeded" }, output, usage: { points_charged: 20, points_refunded: 0 } },
            { status: 201 },
          ),
        ),
      );
      const created = await create(apiKey, "image");
      t.clock.advance(2_000);
      await t.relay.submitter.runOnce();
      const { json } = await get(apiKey, `/openapi/v1/tasks/${created.data.id}`);
      expect(json).toEqual({
        data: {
          id: created.data.id,
          type: "image",
          status: "succeeded",
          model: "p-image",
          created_at: NOW,
          updated_at: "2026-01-01T12:00:02.000Z",
          completed_at: "2026-01-01T12:00:02.000Z",
          upstream_task_id: "up_42",
          error: null,
          metadata: null,
          callback: {
            url: null,
            events: ["task.succeeded", "task.failed", "task.canceled"],
            delivery: { status: "none", attempts: 0, last_attempt_at: null, last_status_code: null },
          },
          estimated_completion_at: null,
        },
        output,
        usage: { points_charged: 20, points_refunded: 0 },
      });
    });

    it("estimates when a waiting or running task ends once the model's durations are learned; null once ended", async () => {
      const { apiKey } = await t.client();
      const queued = await create(apiKey, "image");
      // Unknown durations: no estimate.
      expect((await get(apiKey, `/openapi/v1/tasks/${queued.data.id}`)).json.data.estimated_completion_at).toBeNull();
      // What the poller stores as tasks of the model finish (workers/duration-stats.ts): a 10 s median.
      await t.store.accounts.saveDurationSamples("image", "p-image", [8_000, 10_000, 30_000], t.clock.now());
      const waiting = (await get(apiKey, `/openapi/v1/tasks/${queued.data.id}`)).json.data;
      expect(waiting.queue_position).toBe(1);
      expect(waiting.estimated_completion_at).toBe(new Date(t.clock.now() + 10_000).toISOString());

      let status = "processing";
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, () =>
          HttpResponse.json({ data: { id: "up_eta", status: "processing" } }, { status: 201 }),
        ),
        http.get(`${UPSTREAM_URL}/openapi/v1/tasks/up_eta`, () =>
          HttpResponse.json({
            data: { id: "up_eta", status },
            output: status === "succeeded" ? { images: [] } : null,
            usage: { points_charged: 20, points_refunded: 0 },
          }),
        ),
      );
      const submittedAt = t.clock.now();
      await t.relay.submitter.runOnce();
      t.clock.advance(3_000);
      const running = (await get(apiKey, `/openapi/v1/tasks/${queued.data.id}`)).json.data;
      expect(running.status).toBe("processing");
      expect(running.estimated_completion_at).toBe(new Date(submittedAt + 10_000).toISOString());
      expect(Date.parse(running.estimated_completion_at)).toBeGreaterThan(t.clock.now());
      // List items carry it too (running: from the median loaded once for the page).
      const listed = (await get(apiKey, "/openapi/v1/tasks")).json.data as Json[];
      expect(listed.find((i) => i.id === queued.data.id)?.estimated_completion_at).toBe(
        running.estimated_completion_at,
      );
      // Overdue: never in the past.
      t.clock.advance(20_000);
      const overdue = (await get(apiKey, `/openapi/v1/tasks/${queued.data.id}`)).json.data;
      expect(overdue.estimated_completion_at).toBe(new Date(t.clock.now()).toISOString());

      status = "succeeded";
      t.clock.advance(60_000);
      await t.relay.poller.runOnce();
      const ended = (await get(apiKey, `/openapi/v1/tasks/${queued.data.id}`)).json.data;
      expect(ended.status).toBe("succeeded");
      expect(ended.estimated_completion_at).toBeNull();
    });

    it("a creation's 201 carries the estimate a read gives, reading the model's durations once", async () => {
      const { apiKey } = await t.client();
      await t.store.accounts.saveDurationSamples("image", "p-image", [8_000, 10_000, 30_000], t.clock.now());
      const reads = vi.spyOn(t.store.accounts, "durationSamples");
      const created = (await create(apiKey, "image")).data;
      expect(reads).toHaveBeenCalledTimes(1);
      expect(created.estimated_completion_at).toBe(new Date(t.clock.now() + 10_000).toISOString());
      const read = (await get(apiKey, `/openapi/v1/tasks/${created.id}`)).json.data;
      expect(read.estimated_completion_at).toBe(created.estimated_completion_at);
      reads.mockRestore();
    });

    it("the task.processing event carries the estimated end from the model's learned median", async () => {
      const { apiKey } = await t.client();
      await t.store.accounts.saveDurationSamples("image", "p-image", [8_000, 10_000, 30_000], t.clock.now());
      const created = await create(apiKey, "image", { callback_events: ["task.processing", "task.succeeded"] });
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, () =>
          HttpResponse.json({ data: { id: "up_eta_event", status: "processing" } }, { status: 201 }),
        ),
      );
      const submittedAt = t.clock.now();
      await t.relay.submitter.runOnce();
      const feed = (await get(apiKey, "/openapi/v1/events")).json.data as Json[];
      const processing = feed.find((e) => e.type === "task.processing" && e.data.id === created.data.id);
      expect(processing?.data.estimated_completion_at).toBe(new Date(submittedAt + 10_000).toISOString());
    });

    it("keeps the upstream's error code, message and request_id when submission is refused", async () => {
      const { apiKey } = await t.client();
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, () =>
          HttpResponse.json(
            { error: { code: "insufficient_points", message: "Balance too low.", request_id: "up_req_9" } },
            { status: 402 },
          ),
        ),
      );
      const created = await create(apiKey, "image");
      await t.relay.submitter.runOnce();
      const { json } = await get(apiKey, `/openapi/v1/tasks/${created.data.id}`);
      expect(json.data.status).toBe("failed");
      expect(json.data.error).toEqual({
        code: "insufficient_points",
        message: "Balance too low.",
        request_id: "up_req_9",
      });
    });

    it("another client's task is 404 task_not_found, the same as an unknown id", async () => {
      const a = await t.client("a");
      const b = await t.client("b");
      const created = await create(a.apiKey);
      const id = created.data.id as string;
      const theirs = await get(b.apiKey, `/openapi/v1/tasks/${id}`);
      const unknown = await get(b.apiKey, "/openapi/v1/tasks/task_00000000000000000000000000");
      expect(theirs.status).toBe(404);
      expect(theirs.json).toEqual({
        error: {
          code: "task_not_found",
          message: "No task with this id belongs to your API key.",
          request_id: requestId,
        },
      });
      expect(unknown.status).toBe(404);
      expect({ ...unknown.json.error, request_id: "" }).toEqual({ ...theirs.json.error, request_id: "" });
      // Nor can B act on it.
      for (const [method, path] of [
        ["POST", `/openapi/v1/tasks/${id}/cancel`],
        ["GET", `/openapi/v1/tasks/${id}/deliveries`],
        ["POST", `/openapi/v1/tasks/${id}/redeliver`],
      ] as const) {
        const res = await get(b.apiKey, path, { method });
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(res.json).toEqual(errorBody("task_not_found"));
      }
      // A still sees it, unchanged.
      expect((await get(a.apiKey, `/openapi/v1/tasks/${id}`)).json.data.status).toBe("queued");
    });
  });

  describe("GET /openapi/v1/tasks", () => {
    relayPerTest(open, useRelay);
    it("never mixes clients", async () => {
      const a = await t.client("a");
      const b = await t.client("b");
      const aIds: string[] = [];
      const bIds: string[] = [];
      for (let i = 0; i < 3; i++) {
        aIds.push((await create(a.apiKey, i % 2 ? "video" : "image")).data.id);
        t.clock.advance(1_000);
        if (i < 2) bIds.push((await create(b.apiKey, "image")).data.id);
        t.clock.advance(1_000);
      }
      const listA = await get(a.apiKey, "/openapi/v1/tasks");
      const listB = await get(b.apiKey, "/openapi/v1/tasks");
      expect(listA.json.data.map((x: Json) => x.id)).toEqual([...aIds].reverse());
      expect(listB.json.data.map((x: Json) => x.id)).toEqual([...bIds].reverse());
      // Walking B's pages with a tiny limit never reaches A's tasks either.
      const page = await get(b.apiKey, "/openapi/v1/tasks?limit=1");
      const next = await get(b.apiKey, `/openapi/v1/tasks?limit=5&cursor=${page.json.next_cursor}`);
      expect(next.json).toMatchObject({ data: [{ id: bIds[0] }], next_cursor: null });
      // A client with no tasks sees an empty page.
      const c = await t.client("c");
      expect((await get(c.apiKey, "/openapi/v1/tasks")).json).toEqual({ data: [], next_cursor: null });
    });

    it("items are the task flattened as in a webhook's data", async () => {
      const { apiKey } = await t.client();
      const created = await create(apiKey, "image", { metadata: { m: "1" } });
      const { json } = await get(apiKey, "/openapi/v1/tasks");
      const { queue_position: _q, ...data } = created.data;
      expect(json).toEqual({ data: [{ ...data, output: created.output, usage: created.usage }], next_cursor: null });
    });

    it("pages newest first through every task without duplicates, with type and status filters", async () => {
      const { apiKey } = await t.client();
      const ids: { id: string; kind: "image" | "video" }[] = [];
      for (let i = 0; i < 7; i++) {
        const kind = i % 2 === 0 ? "image" : "video";
        ids.push({ id: (await create(apiKey, kind)).data.id, kind });
        t.clock.advance(1_000);
      }
      const newestFirst = ids.map((x) => x.id).reverse();

      const seen: string[] = [];
      const sizes: number[] = [];
      let cursor: string | null = null;
      do {
        const page: { json: Json } = await get(
          apiKey,
          `/openapi/v1/tasks?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
        );
        sizes.push(page.json.data.length);
        seen.push(...page.json.data.map((x: Json) => x.id));
        cursor = page.json.next_cursor;
        expect(cursor === null || typeof cursor === "string").toBe(true);
      } while (cursor !== null && seen.length < 50);
      expect(sizes).toEqual([3, 3, 1]);
      expect(seen).toEqual(newestFirst);

      // A page that ends exactly at the last task says so (no empty trailing page).
      expect((await get(apiKey, "/openapi/v1/tasks?limit=7")).json.next_cursor).toBeNull();
      // Default limit 20 covers all seven.
      expect((await get(apiKey, "/openapi/v1/tasks")).json.data).toHaveLength(7);

      const videos = await get(apiKey, "/openapi/v1/tasks?type=video");
      expect(videos.json.data.map((x: Json) => x.id)).toEqual(
        ids
          .filter((x) => x.kind === "video")
          .map((x) => x.id)
          .reverse(),
      );
      expect(videos.json.data.every((x: Json) => x.type === "video")).toBe(true);

      // Cancel two images; the status filter finds exactly them, and paging a filter works too.
      const canceled = [ids[0]!.id, ids[4]!.id];
      for (const id of canceled)
        expect((await get(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
      const first = await get(apiKey, "/openapi/v1/tasks?status=canceled&limit=1");
      expect(first.json.data.map((x: Json) => x.id)).toEqual([canceled[1]]);
      const second = await get(apiKey, `/openapi/v1/tasks?status=canceled&limit=1&cursor=${first.json.next_cursor}`);
      expect(second.json).toMatchObject({ data: [{ id: canceled[0], status: "canceled" }], next_cursor: null });
      const queuedImages = await get(apiKey, "/openapi/v1/tasks?status=queued&type=image");
      expect(queuedImages.json.data.map((x: Json) => x.id)).toEqual([ids[6]!.id, ids[2]!.id]);
    });

    it.each([
      ["limit=0", "limit"],
      ["limit=101", "limit"],
      ["limit=abc", "limit"],
      ["limit=-1", "limit"],
      ["limit=2.5", "limit"],
      ["type=gif", "type"],
      ["status=done", "status"],
      [`cursor=${"c".repeat(201)}`, "cursor"],
      ["cursor=garbage", "cursor"],
      ["cursor=%00%01", "cursor"],
      [`cursor=${Buffer.from(JSON.stringify({ b: 42 })).toString("base64url")}`, "cursor"],
      [`cursor=${Buffer.from("[1,2]").toString("base64url")}`, "cursor"],
      [`cursor=${Buffer.from("null").toString("base64url")}`, "cursor"],
    ])("?%s is 400 invalid_request naming %s", async (query, field) => {
      const { apiKey } = await t.client();
      await create(apiKey);
      const { status, json } = await get(apiKey, `/openapi/v1/tasks?${query}`);
      expect(status).toBe(400);
      expect(json).toEqual({
        error: {
          code: "invalid_request",
          message: expect.any(String),
          request_id: requestId,
          details: [{ field, message: expect.any(String) }],
        },
      });
    });

    it("accepts limit 1 and 100", async () => {
      const { apiKey } = await t.client();
      await create(apiKey);
      expect((await get(apiKey, "/openapi/v1/tasks?limit=1")).status).toBe(200);
      expect((await get(apiKey, "/openapi/v1/tasks?limit=100")).status).toBe(200);
    });

    // The store's value rules seen from the API (store.ts, values). No request the HTTP validation
    // accepts carries a value the store refuses to write (bodies are NUL-checked, numbers bounded
    // integers, keys short): a hostile value reaches the store only where it is compared.
    it("a cursor holding NUL matches no task: an empty page on both drivers", async () => {
      const { apiKey } = await t.client();
      await create(apiKey);
      // Every task id sorts before "zzz…": SQLite compared the bytes and listed the task, PostgreSQL listed none.
      const cursor = Buffer.from(JSON.stringify({ b: "zzz\u0000" })).toString("base64url");
      expect(await get(apiKey, `/openapi/v1/tasks?cursor=${cursor}`)).toMatchObject({
        status: 200,
        json: { data: [], next_cursor: null },
      });
    });

    it("a value the store refuses answers 400 invalid_request naming the rule, never 500", async () => {
      const { apiKey } = await t.client();
      await create(apiKey);
      // No request reaches the store with one today; a list bound with a fractional limit stands in for one that would.
      const list = t.store.tasks.list.bind(t.store.tasks);
      t.store.tasks.list = (o) => list({ ...o, limit: o.limit + 0.5 });
      const { status, json } = await get(apiKey, "/openapi/v1/tasks?limit=2");
      expect({ status, json }).toEqual({
        status: 400,
        json: {
          error: {
            code: "invalid_request",
            message:
              "The request contains a value the relay cannot store: 3.5 is not a whole number the store can hold exactly.",
            request_id: requestId,
          },
        },
      });
    });
  });

  describe("POST /openapi/v1/tasks/{id}/cancel", () => {
    relayPerTest(open, useRelay);
    it("cancels a task not yet submitted, uncharged, and the submitter never sends it", async () => {
      const calls = countUpstream();
      const { apiKey } = await t.client();
      const created = await create(apiKey, "image", { callback_url: "https://hooks.example.com/h" });
      t.clock.advance(1_500);
      const res = await get(apiKey, `/openapi/v1/tasks/${created.data.id}/cancel`, { method: "POST" });
      expect(res.status).toBe(200);
      const { queue_position: _q, ...waiting } = created.data;
      expect(res.json).toEqual({
        data: {
          ...waiting,
          status: "canceled",
          updated_at: "2026-01-01T12:00:01.500Z",
          completed_at: "2026-01-01T12:00:01.500Z",
          callback: {
            ...waiting.callback,
            delivery: { status: "pending", attempts: 0, last_attempt_at: null, last_status_code: null },
          },
        },
        output: null,
        usage: { points_charged: 0, points_refunded: 0 },
      });
      expect((await get(apiKey, `/openapi/v1/tasks/${created.data.id}`)).json).toEqual(res.json);

      t.clock.advance(60_000);
      await t.relay.submitter.runOnce();
      t.clock.advance(10 * 60_000);
      await t.relay.submitter.runOnce();
      expect(calls).toEqual([]);
      expect((await get(apiKey, `/openapi/v1/tasks/${created.data.id}`)).json.data.status).toBe("canceled");

      // Canceling again is harmless and answers the same task.
      const again = await get(apiKey, `/openapi/v1/tasks/${created.data.id}/cancel`, { method: "POST" });
      expect(again.status).toBe(200);
      expect(again.json).toEqual(res.json);
    });

    it("a submitted task cannot be canceled: 409 cannot_cancel", async () => {
      const calls = countUpstream(() => HttpResponse.json({ data: { id: "up_1", status: "queued" } }, { status: 201 }));
      const { apiKey } = await t.client();
      const created = await create(apiKey);
      await t.relay.submitter.runOnce();
      expect(calls).toEqual(["POST /openapi/v1/images/generations"]);
      const res = await get(apiKey, `/openapi/v1/tasks/${created.data.id}/cancel`, { method: "POST" });
      expect(res.status).toBe(409);
      expect(res.json).toEqual(errorBody("cannot_cancel"));
      expect((await get(apiKey, `/openapi/v1/tasks/${created.data.id}`)).json.data.status).toBe("queued");
    });

    it.each([
      [
        "a task whose submission may have reached the upstream (5xx, retry pending) cannot be canceled",
        () => HttpResponse.json({ error: { code: "internal_error", message: "boom" } }, { status: 500 }),
      ],
      [
        "a finished task cannot be canceled",
        () =>
          HttpResponse.json(
            { data: { id: "up_1", status: "succeeded" }, output: { url: "https://cdn.example.com/x.png" } },
            { status: 201 },
          ),
      ],
    ])("%s", async (_name, upstreamAnswer) => {
      countUpstream(upstreamAnswer);
      const { apiKey } = await t.client();
      const created = await create(apiKey);
      await t.relay.submitter.runOnce();
      const res = await get(apiKey, `/openapi/v1/tasks/${created.data.id}/cancel`, { method: "POST" });
      expect(res.status).toBe(409);
      expect(res.json).toEqual(errorBody("cannot_cancel"));
    });

    it("an unknown task is 404 task_not_found", async () => {
      const { apiKey } = await t.client();
      const res = await get(apiKey, "/openapi/v1/tasks/task_nope/cancel", { method: "POST" });
      expect(res.status).toBe(404);
      expect(res.json).toEqual(errorBody("task_not_found"));
    });
  });

  describe("authorisation matrix: every /openapi/v1 route refuses bad keys with 401 invalid_api_key", () => {
    // One relay for the whole matrix: a refused request changes nothing, and a valid one changes
    // nothing another route's refusal depends on (a relay per test made this block the file's cost).
    let ctx: { valid: string; revoked: string; taskId: string };
    relayPerBlock(open, async (r) => {
      t = r;
      const valid = (await t.client("valid")).apiKey;
      const revokedClient = await t.client("revoked");
      const taskId = (await create(revokedClient.apiKey)).data.id as string;
      await revokeClient(t.relay.deps, revokedClient.id);
      ctx = { valid, revoked: revokedClient.apiKey, taskId };
    });
    let upstreamCalls: string[];
    beforeEach(() => {
      upstreamCalls = countUpstream((req) =>
        new URL(req.url).pathname === "/openapi/v1/models"
          ? HttpResponse.json({ data: [] })
          : HttpResponse.json({ error: { code: "internal_error" } }, { status: 500 }),
      );
    });

    const send = (route: (typeof ROUTES)[number], headers: Record<string, string>) =>
      t.request(
        null,
        route.path.replace("{id}", ctx.taskId).replace("{host}", encodeURIComponent("hooks.example.com:443")),
        { method: route.method, headers, ...route.init },
      );

    describe.each(ROUTES.map((r) => ({ ...r, label: `${r.method} ${r.path}` })))("$label", (route) => {
      it.each(CREDENTIALS)("%s", async (_label, credential) => {
        const res = await send(route, credential(ctx));
        expect(res.status).toBe(401);
        expect(await res.json()).toEqual({
          error: {
            code: "invalid_api_key",
            message: "Missing, unknown or revoked API key. Send Authorization: Bearer <key>.",
            request_id: requestId,
          },
        });
        expect(res.headers.get("x-request-id")).toMatch(/^req_/);
        expect(upstreamCalls).toEqual([]);
      });

      it("is reached with a valid key (the matrix is not vacuous)", async () => {
        const res = await send(route, { Authorization: `Bearer ${ctx.valid}` });
        expect(res.status).not.toBe(401);
        expect(res.status).toBeLessThan(500);
      });
    });

    describe.each(PUBLIC_ROUTES.map((r) => ({ ...r, label: `${r.method} ${r.path}` })))("$label (public)", (route) => {
      it.each(CREDENTIALS)("%s: answered as without one", async (_label, credential) => {
        const res = await t.request(null, route.path.replace("{client_id}", "cli_unknown"), {
          method: route.method,
          headers: credential(ctx),
        });
        expect(res.status).toBe(404);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
        expect(upstreamCalls).toEqual([]);
      });
    });

    it("covers every /openapi/v1 route in /openapi.json, and nothing else", async () => {
      const doc = (await (await t.request(null, "/openapi.json")).json()) as {
        paths: Record<string, Record<string, unknown>>;
      };
      const documented = Object.entries(doc.paths)
        .filter(([path]) => path.startsWith("/openapi/v1/"))
        .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
        .sort();
      expect(documented).toEqual([...ROUTES, ...PUBLIC_ROUTES].map((r) => `${r.method} ${r.path}`).sort());
      // What the document says of each: the bearer key, or (the public ones) none.
      for (const r of [...ROUTES, ...PUBLIC_ROUTES])
        expect((doc.paths[r.path]![r.method.toLowerCase()] as { security?: unknown }).security, r.path).toEqual(
          PUBLIC_ROUTES.includes(r) ? [] : [{ bearerAuth: [] }],
        );
    });
  });

  describe("other routes", () => {
    relayPerTest(open, useRelay);
    it("an unknown route is 404 not_found (with a key, and without one outside /openapi/v1)", async () => {
      const { apiKey } = await t.client();
      const res = await get(apiKey, "/openapi/v1/nothing-here");
      expect(res.status).toBe(404);
      expect(res.json).toEqual({
        error: { code: "not_found", message: "No route GET /openapi/v1/nothing-here.", request_id: requestId },
      });
      const bare = await get(null, "/favicon.ico");
      expect(bare.status).toBe(404);
      expect(bare.json).toEqual({
        error: { code: "not_found", message: "No route GET /favicon.ico.", request_id: requestId },
      });
      expect(bare.res.headers.get("x-request-id")).toBe(bare.json.error.request_id);
    });

    it("GET /healthz is 200 without a key", async () => {
      const res = await get(null, "/healthz");
      expect(res.status).toBe(200);
      expect(res.json).toEqual({ status: "ok" });
      expect(res.res.headers.get("x-request-id")).toMatch(/^req_/);
    });

    it("GET /readyz is 503 naming each stopped worker, without a key", async () => {
      const res = await get(null, "/readyz");
      expect(res.status).toBe(503);
      expect(res.json).toEqual({
        status: "unavailable",
        problems: expect.arrayContaining([
          "worker submitter not running",
          "worker poller not running",
          "worker dispatcher not running",
        ]),
      });
    });

    it("GET /openapi.json is an OpenAPI 3.1 document with the bearer scheme", async () => {
      const res = await get(null, "/openapi.json");
      expect(res.status).toBe(200);
      expect(res.json.openapi).toMatch(/^3\.1\./);
      expect(res.json.info).toMatchObject({ title: "genrelay" });
      expect(res.json.components.securitySchemes.bearerAuth).toMatchObject({ type: "http", scheme: "bearer" });
      for (const r of ROUTES)
        expect(res.json.paths[r.path]?.[r.method.toLowerCase()], `${r.method} ${r.path}`).toBeDefined();
      for (const p of ["/healthz", "/readyz"]) expect(res.json.paths[p]?.get, p).toBeDefined();
      // The creation routes document their Idempotency-Key header and the relay's fields.
      const op = res.json.paths["/openapi/v1/images/generations"].post;
      expect(op.parameters).toEqual(
        expect.arrayContaining([expect.objectContaining({ name: "Idempotency-Key", in: "header", required: true })]),
      );
    });

    it("GET /docs is an HTML page", async () => {
      const res = await t.request(null, "/docs");
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/html/);
      expect(await res.text()).toContain("/openapi.json");
    });
  });

  describe("GET /openapi/v1/models", () => {
    relayPerTest(open, useRelay);
    it("answers the upstream body verbatim, from cache, and stale (with Age) when the upstream fails", async () => {
      const catalog = {
        object: "list",
        data: [
          { id: "p-image", kind: "image", sizes: ["1K", "2K"] },
          { id: "v-video", durations: [5, 10] },
        ],
      };
      let upstream: () => Response = () => HttpResponse.json(catalog);
      const auth: (string | null)[] = [];
      server.use(
        http.get(`${UPSTREAM_URL}/openapi/v1/models`, ({ request }) => {
          auth.push(request.headers.get("authorization"));
          return upstream();
        }),
      );
      const { apiKey } = await t.client();

      const first = await get(apiKey, "/openapi/v1/models");
      expect(first.status).toBe(200);
      expect(first.json).toEqual(catalog);
      expect(first.res.headers.get("age")).toBe("0");
      expect(auth).toEqual([`Bearer ${UPSTREAM_KEY}`]);

      // Fresh: from memory, the Age counting up.
      t.clock.advance(90_000);
      const cached = await get(apiKey, "/openapi/v1/models");
      expect(cached.json).toEqual(catalog);
      expect(cached.res.headers.get("age")).toBe("90");
      expect(auth).toHaveLength(1);

      // Stale and the upstream down: still the last good copy, with its age.
      upstream = () => HttpResponse.json({ error: { code: "service_unavailable", message: "down" } }, { status: 503 });
      t.clock.advance(5 * 60_000);
      const stale = await get(apiKey, "/openapi/v1/models");
      expect(stale.status).toBe(200);
      expect(stale.json).toEqual(catalog);
      expect(stale.res.headers.get("age")).toBe("390");
      await expect.poll(() => auth.length).toBe(2);
      const stillStale = await get(apiKey, "/openapi/v1/models");
      expect(stillStale.status).toBe(200);
      expect(stillStale.json).toEqual(catalog);

      // A failed refresh is not retried on every request, only after a pause.
      expect(auth).toHaveLength(2);

      // The upstream back with a new catalog: the next background refresh picks it up.
      const newer = { object: "list", data: [{ id: "p-image-2" }] };
      upstream = () => HttpResponse.json(newer);
      t.clock.advance(30_000);
      await get(apiKey, "/openapi/v1/models");
      await expect.poll(async () => (await get(apiKey, "/openapi/v1/models")).json).toEqual(newer);
      expect((await get(apiKey, "/openapi/v1/models")).res.headers.get("age")).toBe("0");
    });

    it("without any cached copy, an upstream failure is 503 service_unavailable", async () => {
      server.use(
        http.get(`${UPSTREAM_URL}/openapi/v1/models`, () =>
          HttpResponse.json({ error: { code: "internal_error" } }, { status: 500 }),
        ),
      );
      const { apiKey } = await t.client();
      const res = await get(apiKey, "/openapi/v1/models");
      expect(res.status).toBe(503);
      expect(res.json).toEqual(errorBody("service_unavailable"));
    });
  });

  describe("no request produces a 5xx", () => {
    relayPerTest(open, useRelay);
    const headerValue = fc.stringMatching(/^[\x21-\x7e][\x20-\x7e]{0,80}$/);
    const anyJson = fc.jsonValue({ maxDepth: 4 });

    it("random JSON bodies and header values on the creation endpoints", async () => {
      const { apiKey } = await t.client();
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom("/openapi/v1/images/generations", "/openapi/v1/videos/generations"),
          fc.oneof(
            anyJson,
            // Valid bodies with random values spliced in reach deeper than random JSON alone.
            fc
              .record({
                base: fc.constantFrom(imageBody(), videoBody()),
                extra: fc.dictionary(
                  fc.constantFrom(
                    "model",
                    "mode",
                    "prompt",
                    "count",
                    "image_urls",
                    "video_mode",
                    "duration",
                    "source_video_url",
                    "callback_url",
                    "callback_events",
                    "metadata",
                    "expires_after_seconds",
                    "__proto__",
                    "constructor",
                    "toString",
                  ),
                  anyJson,
                ),
              })
              .map(({ base, extra }) => ({ ...base, ...extra })),
          ),
          fc.option(headerValue, { nil: undefined }),
          fc.constantFrom(
            "application/json",
            "application/json; charset=utf-8",
            "application/vnd.api+json",
            "text/plain",
            "",
            "application/json; charset=latin1",
          ),
          fc.option(headerValue, { nil: undefined }),
          async (path, body, idemKey, contentType, authSuffix) => {
            const headers: Record<string, string> = {
              Authorization: authSuffix === undefined ? `Bearer ${apiKey}` : `Bearer ${authSuffix}`,
            };
            if (idemKey !== undefined) headers["Idempotency-Key"] = idemKey;
            if (contentType) headers["Content-Type"] = contentType;
            const res = await t.request(null, path, {
              method: "POST",
              headers,
              body: new TextEncoder().encode(JSON.stringify(body)),
            });
            expect(res.status).toBeLessThan(500);
            const json = (await res.json()) as Json;
            if (res.status >= 400)
              expect(json.error).toMatchObject({
                code: expect.any(String),
                message: expect.any(String),
                request_id: requestId,
              });
          },
        ),
        { numRuns: 300 },
      );
    });

    it("random query strings, ids and headers on the read routes", async () => {
      const { apiKey } = await t.client();
      await create(apiKey);
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(
            "/openapi/v1/tasks",
            "/openapi/v1/events",
            "/openapi/v1/tasks/",
            "/openapi/v1/tasks/x/deliveries",
          ),
          fc.dictionary(
            fc.constantFrom("limit", "cursor", "type", "status", "after", "x"),
            fc.oneof(fc.string({ maxLength: 40 }), fc.integer().map(String), fc.base64String({ maxLength: 60 })),
          ),
          fc.string({ maxLength: 30 }),
          fc.option(headerValue, { nil: undefined }),
          async (path, query, id, accept) => {
            const qs = new URLSearchParams(query).toString();
            const target = path.endsWith("/")
              ? `${path}${encodeURIComponent(id)}`
              : path.replace("/x/", `/${encodeURIComponent(id) || "x"}/`);
            const headers: Record<string, string> = {};
            if (accept !== undefined) headers.Accept = accept;
            const res = await t.request(apiKey, `${target}${qs ? `?${qs}` : ""}`, { headers });
            expect(res.status).toBeLessThan(500);
          },
        ),
        { numRuns: 300 },
      );
    });

    it("bodies nested arbitrarily deep, in arrays or objects, anywhere in the body", async () => {
      const { apiKey } = await t.client();
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 150_000 }),
          fc.constantFrom("[", '{"a":'),
          fc.constantFrom("extra", "metadata", "callback_events", "prompt", "image_urls"),
          async (depth, open, field) => {
            const close = open === "[" ? "]" : "}";
            const nested = `${open.repeat(depth)}1${close.repeat(depth)}`;
            const body = JSON.stringify(imageBody()).replace(/}$/, `,${JSON.stringify(field)}:${nested}}`);
            const res = await t.request(apiKey, "/openapi/v1/images/generations", {
              method: "POST",
              headers: { "Content-Type": "application/json", "Idempotency-Key": `deep-${depth}-${field}` },
              body: new TextEncoder().encode(body),
            });
            expect(res.status).toBeLessThan(500);
          },
        ),
        { numRuns: 60 },
      );
    });

    it("raw bytes that are not JSON at all", async () => {
      const { apiKey } = await t.client();
      await fc.assert(
        fc.asyncProperty(fc.uint8Array({ maxLength: 200 }), async (bytes) => {
          const res = await t.request(apiKey, "/openapi/v1/images/generations", {
            method: "POST",
            headers: { "Content-Type": "application/json", "Idempotency-Key": "raw-bytes-key" },
            body: bytes,
          });
          expect(res.status).toBeLessThan(500);
        }),
        { numRuns: 200 },
      );
    });
  });
});

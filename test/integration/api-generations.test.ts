import { http, HttpResponse } from "msw";
import { describe, expect, it } from "vitest";
import {
  imageBody,
  relayDialects,
  relayPerBlock,
  relayPerTest,
  UPSTREAM_URL,
  videoBody,
  type DialectRelay,
} from "../helpers/relay.js";
import { mswServer } from "../helpers/upstream-suite.js";

const server = mswServer();

let t: DialectRelay;
let apiKey: string;
const dialects = relayDialects();

type Kind = "image" | "video";
const PATHS: Record<Kind, string> = {
  image: "/openapi/v1/images/generations",
  video: "/openapi/v1/videos/generations",
};
const baseBody = (kind: Kind) => (kind === "image" ? imageBody() : videoBody());
const requestId = expect.stringMatching(/^req_/);
const KEY = "order-1234-image";

/** POSTs raw bytes so a case controls the Content-Type (a string body would get text/plain). */
function post(kind: Kind, body: string | Uint8Array, headers: Record<string, string | undefined>): Promise<Response> {
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) h[k] = v;
  return t.request(apiKey, PATHS[kind], {
    method: "POST",
    headers: h,
    body: typeof body === "string" ? new TextEncoder().encode(body) : body,
  });
}

interface BadCase {
  name: string;
  /** Defaults to both endpoints. */
  only?: Kind;
  /** The body: a function of the endpoint's valid body, or raw text. */
  body?: ((base: Record<string, unknown>) => unknown) | { raw: string };
  headers?: Record<string, string | undefined>;
  status: number;
  code: string;
  /** The fields error.details must name (exactly, in order); undefined: no details asserted beyond absence/presence. */
  fields?: string[];
}

const JSON_HEADERS = { "Content-Type": "application/json", "Idempotency-Key": KEY };
/** An array nested `levels` deep, counting the body object that holds it as one more. */
const nest = (levels: number): unknown => {
  let v: unknown = "leaf";
  for (let i = 1; i < levels; i++) v = [v];
  return v;
};
const metadataOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));

const BAD: BadCase[] = [
  // Idempotency-Key
  {
    name: "missing Idempotency-Key",
    headers: { "Idempotency-Key": undefined },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  {
    name: "Idempotency-Key of 7 characters",
    headers: { "Idempotency-Key": "abcdefg" },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  {
    name: "Idempotency-Key of 129 characters",
    headers: { "Idempotency-Key": "k".repeat(129) },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  {
    name: "Idempotency-Key with a slash",
    headers: { "Idempotency-Key": "order/1234/x" },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  {
    name: "Idempotency-Key with a space",
    headers: { "Idempotency-Key": "order 1234 x" },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  {
    name: "Idempotency-Key with non-ASCII",
    headers: { "Idempotency-Key": "ordre-é-12345" },
    status: 400,
    code: "invalid_request",
    fields: ["Idempotency-Key"],
  },
  // Content-Type
  { name: "no Content-Type", headers: { "Content-Type": undefined }, status: 415, code: "unsupported_media_type" },
  {
    name: "Content-Type text/plain",
    headers: { "Content-Type": "text/plain" },
    status: 415,
    code: "unsupported_media_type",
  },
  {
    name: "Content-Type form-urlencoded",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    status: 415,
    code: "unsupported_media_type",
  },
  // Not a JSON object
  { name: "malformed JSON", body: { raw: '{"model": "p-image", ' }, status: 400, code: "invalid_request" },
  { name: "empty body", body: { raw: "" }, status: 400, code: "invalid_request" },
  { name: "an array body", body: () => [imageBody()], status: 400, code: "invalid_request", fields: ["(body)"] },
  { name: "a string body", body: () => "a red fox", status: 400, code: "invalid_request", fields: ["(body)"] },
  { name: "a null body", body: () => null, status: 400, code: "invalid_request", fields: ["(body)"] },
  { name: "a number body", body: () => 42, status: 400, code: "invalid_request", fields: ["(body)"] },
  // Field validation
  {
    name: "prompt of 2 characters",
    body: (b) => ({ ...b, prompt: "ab" }),
    status: 422,
    code: "validation_error",
    fields: ["prompt"],
  },
  {
    name: "prompt of whitespace around 2 characters",
    body: (b) => ({ ...b, prompt: " a \n\t b  " }),
    status: 422,
    code: "validation_error",
    fields: ["prompt"],
  },
  {
    name: "prompt not a string",
    body: (b) => ({ ...b, prompt: 12345 }),
    status: 422,
    code: "validation_error",
    fields: ["prompt"],
  },
  {
    name: "missing prompt",
    body: ({ prompt: _p, ...b }) => b,
    status: 422,
    code: "validation_error",
    fields: ["prompt"],
  },
  {
    name: "count 2",
    only: "image",
    body: (b) => ({ ...b, count: 2 }),
    status: 422,
    code: "validation_error",
    fields: ["count"],
  },
  {
    name: "missing count",
    only: "image",
    body: ({ count: _c, ...b }) => b,
    status: 422,
    code: "validation_error",
    fields: ["count"],
  },
  { name: "missing model", body: ({ model: _m, ...b }) => b, status: 422, code: "validation_error", fields: ["model"] },
  { name: "empty model", body: (b) => ({ ...b, model: "" }), status: 422, code: "validation_error", fields: ["model"] },
  {
    name: "bad mode",
    only: "image",
    body: (b) => ({ ...b, mode: "paint" }),
    status: 422,
    code: "validation_error",
    fields: ["mode"],
  },
  {
    name: "edit without image_urls",
    only: "image",
    body: (b) => ({ ...b, mode: "edit" }),
    status: 422,
    code: "validation_error",
    fields: ["image_urls"],
  },
  {
    name: "edit with empty image_urls",
    only: "image",
    body: (b) => ({ ...b, mode: "edit", image_urls: [] }),
    status: 422,
    code: "validation_error",
    fields: ["image_urls"],
  },
  {
    name: "missing video_mode",
    only: "video",
    body: ({ video_mode: _v, ...b }) => b,
    status: 422,
    code: "validation_error",
    fields: ["video_mode"],
  },
  {
    name: "duration not a number",
    only: "video",
    body: (b) => ({ ...b, duration: "5s" }),
    status: 422,
    code: "validation_error",
    fields: ["duration"],
  },
  {
    name: "metadata with a number value",
    body: (b) => ({ ...b, metadata: { order: 1234 } }),
    status: 422,
    code: "validation_error",
    fields: ["metadata.order"],
  },
  {
    name: "metadata with a nested object",
    body: (b) => ({ ...b, metadata: { order: { id: "1" } } }),
    status: 422,
    code: "validation_error",
    fields: ["metadata.order"],
  },
  {
    name: "metadata as an array",
    body: (b) => ({ ...b, metadata: ["a"] }),
    status: 422,
    code: "validation_error",
    fields: ["metadata"],
  },
  {
    name: "metadata of 17 keys",
    body: (b) => ({ ...b, metadata: metadataOf(17) }),
    status: 422,
    code: "validation_error",
    fields: ["metadata"],
  },
  {
    name: "metadata over 4 KiB",
    body: (b) => ({ ...b, metadata: { note: "x".repeat(4100) } }),
    status: 422,
    code: "validation_error",
    fields: ["metadata"],
  },
  {
    name: "callback_events with an unknown type",
    body: (b) => ({ ...b, callback_events: ["task.succeeded", "task.exploded"] }),
    status: 422,
    code: "validation_error",
    fields: ["callback_events.1"],
  },
  {
    name: "callback_events as a string",
    body: (b) => ({ ...b, callback_events: "task.succeeded" }),
    status: 422,
    code: "validation_error",
    fields: ["callback_events"],
  },
  {
    name: "callback_events empty",
    body: (b) => ({ ...b, callback_events: [] }),
    status: 422,
    code: "validation_error",
    fields: ["callback_events"],
  },
  {
    name: "callback_events repeated",
    body: (b) => ({ ...b, callback_events: ["task.failed", "task.failed"] }),
    status: 422,
    code: "validation_error",
    fields: ["callback_events"],
  },
  {
    name: "prompt and metadata both bad (each named)",
    body: (b) => ({ ...b, prompt: "", metadata: { a: 1 } }),
    status: 422,
    code: "validation_error",
    fields: ["prompt", "metadata.a"],
  },
  {
    name: "prompt bad and callback_url bad (validation wins, both named)",
    body: (b) => ({ ...b, prompt: "", callback_url: 5 }),
    status: 422,
    code: "validation_error",
    fields: ["prompt", "callback_url"],
  },
  // callback_url
  {
    name: "callback_url http",
    body: (b) => ({ ...b, callback_url: "http://hooks.example.com/genrelay" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url with credentials",
    body: (b) => ({ ...b, callback_url: "https://user:pass@hooks.example.com/" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url to 10.0.0.1",
    body: (b) => ({ ...b, callback_url: "https://10.0.0.1/hook" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url to 127.0.0.1",
    body: (b) => ({ ...b, callback_url: "https://127.0.0.1/hook" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url to [::1]",
    body: (b) => ({ ...b, callback_url: "https://[::1]/hook" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url to IPv4-mapped 169.254.169.254",
    body: (b) => ({ ...b, callback_url: "https://[::ffff:169.254.169.254]/" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url to localhost",
    body: (b) => ({ ...b, callback_url: "https://localhost/hook" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url over 2048 characters",
    body: (b) => ({ ...b, callback_url: `https://hooks.example.com/${"a".repeat(2030)}` }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url relative",
    body: (b) => ({ ...b, callback_url: "/hooks/genrelay" }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  {
    name: "callback_url not a string",
    body: (b) => ({ ...b, callback_url: 42 }),
    status: 400,
    code: "invalid_callback_url",
    fields: ["callback_url"],
  },
  // media URLs
  {
    name: "image_urls http",
    body: (b) => ({ ...b, ...("mode" in b ? { mode: "edit" } : {}), image_urls: ["http://cdn.example.com/a.png"] }),
    status: 400,
    code: "invalid_media_url",
    fields: ["image_urls.0"],
  },
  {
    name: "image_urls second not a URL",
    body: (b) => ({
      ...b,
      ...("mode" in b ? { mode: "edit" } : {}),
      image_urls: ["https://cdn.example.com/a.png", "a.png"],
    }),
    status: 400,
    code: "invalid_media_url",
    fields: ["image_urls.1"],
  },
  {
    name: "source_video_url ftp",
    only: "video",
    body: (b) => ({ ...b, source_video_url: "ftp://cdn.example.com/a.mp4" }),
    status: 400,
    code: "invalid_media_url",
    fields: ["source_video_url"],
  },
  // shape
  {
    name: "an unknown field nested 65 levels deep",
    body: (b) => ({ ...b, extra: nest(65) }),
    status: 400,
    code: "invalid_request",
  },
  {
    name: "an unknown field nested 100 000 levels deep",
    body: { raw: JSON.stringify(imageBody()).replace(/}$/, `,"x":${"[".repeat(100_000)}${"]".repeat(100_000)}}`) },
    status: 400,
    code: "invalid_request",
  },
  // size
  {
    name: "body over 1 MiB",
    body: (b) => ({ ...b, padding: "x".repeat(1024 * 1024) }),
    status: 413,
    code: "payload_too_large",
  },
];

const CASES = BAD.flatMap((c) =>
  c.only ? [[c.only, c] as const] : (["image", "video"] as const).map((k) => [k, c] as const),
);

describe.each(dialects)("on %s", (_dialect, open) => {
  const seed = async (r: DialectRelay) => {
    t = r;
    apiKey = (await r.client("acme")).apiKey;
  };

  describe("creation: bad requests", () => {
    // A refused request stores nothing (each case checks it): the cases share one relay, which also
    // proves that nothing piles up across them.
    describe("refused, all on one relay", () => {
      relayPerBlock(open, seed);
      it.each(CASES.map(([kind, c]) => ({ kind, c, label: `${kind}: ${c.name}` })))("$label", async ({ kind, c }) => {
        const headers = { ...JSON_HEADERS, ...c.headers };
        const body =
          c.body === undefined
            ? JSON.stringify(baseBody(kind))
            : typeof c.body === "function"
              ? JSON.stringify(c.body(baseBody(kind)))
              : c.body.raw;
        const res = await post(kind, body, headers);
        expect(res.status).toBe(c.status);
        expect(res.headers.get("content-type")).toMatch(/^application\/json/);
        const json = (await res.json()) as { error: { details?: { field: string; message: string }[] } };
        const expected: Record<string, unknown> = { code: c.code, message: expect.any(String), request_id: requestId };
        if (c.fields) expected.details = c.fields.map((field) => ({ field, message: expect.any(String) }));
        else if (json.error.details !== undefined) expected.details = expect.anything();
        expect(json).toEqual({ error: expected });
        expect(res.headers.get("x-request-id")).toBe((json.error as unknown as { request_id: string }).request_id);
        // Nothing was stored.
        const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] };
        expect(list.data).toEqual([]);
      });
    });

    describe("on a relay of their own", () => {
      relayPerTest(open, seed);

      it.each([
        [
          "http://127.0.0.1:9000/hook",
          "scheme http: is not allowed (https only, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, for development)",
        ],
        [
          "https://127.0.0.1:9000/hook",
          "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
        ],
        [
          "https://10.0.0.1/hook",
          "10.0.0.1 is private (RFC 1918); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
        ],
        [
          "https://localhost/hook",
          "host localhost is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
        ],
      ])("a callback_url to %s says which variable allows it", async (url, reason) => {
        const res = await post("image", JSON.stringify(imageBody({ callback_url: url })), JSON_HEADERS);
        expect(res.status).toBe(400);
        expect(await res.json()).toEqual({
          error: {
            code: "invalid_callback_url",
            message: `callback_url is not acceptable: ${reason}.`,
            request_id: requestId,
            details: [{ field: "callback_url", message: reason }],
          },
        });
      });

      it("checks the key before the Content-Type (401 first)", async () => {
        const res = await t.request(null, PATHS.image, {
          method: "POST",
          body: "x",
          headers: { "Content-Type": "text/plain" },
        });
        expect(res.status).toBe(401);
        expect(await res.json()).toEqual({
          error: { code: "invalid_api_key", message: expect.any(String), request_id: requestId },
        });
      });

      it("accepts unknown fields nested up to the depth limit", async () => {
        const res = await t.request(apiKey, PATHS.image, {
          method: "POST",
          idempotencyKey: KEY,
          json: imageBody({ extra: nest(64) }),
        });
        expect(res.status).toBe(201);
      });

      it("never takes the request id from the caller's X-Request-Id", async () => {
        const res = await post("image", JSON.stringify({ ...imageBody(), prompt: "x" }), {
          ...JSON_HEADERS,
          "X-Request-Id": "chosen-by-caller",
        });
        expect(res.status).toBe(422);
        const id = res.headers.get("x-request-id");
        expect(id).toMatch(/^req_/);
        expect(((await res.json()) as { error: { request_id: string } }).error.request_id).toBe(id);
      });

      it("accepts Content-Type with a charset parameter", async () => {
        const res = await post("image", JSON.stringify(imageBody()), {
          ...JSON_HEADERS,
          "Content-Type": "application/json; charset=utf-8",
        });
        expect(res.status).toBe(201);
      });

      it("accepts an Idempotency-Key of exactly 8 and exactly 128 allowed characters", async () => {
        for (const key of ["a.b_c:d-", "Z".repeat(128)]) {
          const res = await post("image", JSON.stringify(imageBody()), { ...JSON_HEADERS, "Idempotency-Key": key });
          expect(res.status).toBe(201);
        }
      });

      it("accepts metadata of exactly 16 keys and a callback_url of exactly 2048 characters", async () => {
        const url = `https://hooks.example.com/${"a".repeat(2048 - "https://hooks.example.com/".length)}`;
        expect(url).toHaveLength(2048);
        const res = await t.request(apiKey, PATHS.image, {
          method: "POST",
          idempotencyKey: KEY,
          json: imageBody({ metadata: metadataOf(16), callback_url: url }),
        });
        expect(res.status).toBe(201);
        const json = (await res.json()) as { data: { callback: { url: string }; metadata: Record<string, string> } };
        expect(json.data.callback.url).toBe(url);
        expect(Object.keys(json.data.metadata)).toHaveLength(16);
      });
    });
  });

  describe("creation: accepted", () => {
    relayPerTest(open, seed);
    it.each(["image", "video"] as const)(
      "%s: 201 queued with Location, Idempotent-Replayed and X-Request-Id",
      async (kind) => {
        const res = await t.request(apiKey, PATHS[kind], {
          method: "POST",
          idempotencyKey: KEY,
          json: {
            ...baseBody(kind),
            callback_url: "https://hooks.example.com/genrelay",
            metadata: { order_id: "1234" },
          },
        });
        expect(res.status).toBe(201);
        expect(res.headers.get("idempotent-replayed")).toBe("false");
        expect(res.headers.get("x-request-id")).toMatch(/^req_/);
        const json = (await res.json()) as { data: { id: string } };
        expect(json.data.id).toMatch(/^task_[0-9a-z]{26}$/);
        expect(res.headers.get("location")).toBe(`http://relay.test/openapi/v1/tasks/${json.data.id}`);
        expect(json).toEqual({
          data: {
            id: json.data.id,
            type: kind,
            status: "queued",
            model: kind === "image" ? "p-image" : "v-video",
            created_at: "2026-01-01T12:00:00.000Z",
            updated_at: "2026-01-01T12:00:00.000Z",
            completed_at: null,
            upstream_task_id: null,
            error: null,
            metadata: { order_id: "1234" },
            callback: {
              url: "https://hooks.example.com/genrelay",
              events: ["task.succeeded", "task.failed", "task.canceled"],
              delivery: { status: "none", attempts: 0, last_attempt_at: null, last_status_code: null },
            },
            estimated_completion_at: null,
          },
          output: null,
          usage: { points_charged: null, points_refunded: null },
        });
        // The Location is the task read, and it answers with the same task, plus its place in the queue.
        const read = await t.request(apiKey, new URL(res.headers.get("location")!).pathname);
        expect(read.status).toBe(200);
        expect(await read.json()).toEqual({ ...json, data: { ...json.data, queue_position: 1 } });
      },
    );

    it("keeps the caller's callback_events", async () => {
      const res = await t.request(apiKey, PATHS.image, {
        method: "POST",
        idempotencyKey: KEY,
        json: imageBody({
          callback_url: "https://hooks.example.com/x",
          callback_events: ["task.processing", "task.succeeded"],
        }),
      });
      expect(res.status).toBe(201);
      expect(((await res.json()) as { data: { callback: { events: string[] } } }).data.callback.events).toEqual([
        "task.processing",
        "task.succeeded",
      ]);
    });

    it("sends unknown upstream fields upstream verbatim, never the relay's own fields", async () => {
      const seen: { path: string; body: unknown; key: string | null }[] = [];
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/:kind/generations`, async ({ request }) => {
          seen.push({
            path: new URL(request.url).pathname,
            body: await request.json(),
            key: request.headers.get("idempotency-key"),
          });
          return HttpResponse.json({ data: { id: `up_${seen.length}`, status: "queued" } }, { status: 201 });
        }),
      );
      const extra = { quality: "high", future_option: { nested: [1, "two", null], flag: true }, seed: 7 };
      const relayOnly = {
        callback_url: "https://hooks.example.com/genrelay",
        callback_events: ["task.succeeded"],
        metadata: { order_id: "1234" },
        expires_after_seconds: 3600,
      };
      const img = await t.request(apiKey, PATHS.image, {
        method: "POST",
        idempotencyKey: "img-key-0001",
        json: imageBody({ ...extra, ...relayOnly }),
      });
      const vid = await t.request(apiKey, PATHS.video, {
        method: "POST",
        idempotencyKey: "vid-key-0001",
        json: videoBody({ ...extra, ...relayOnly }),
      });
      expect([img.status, vid.status]).toEqual([201, 201]);
      const imgId = ((await img.json()) as { data: { id: string } }).data.id;
      const vidId = ((await vid.json()) as { data: { id: string } }).data.id;

      await t.relay.submitter.runOnce();

      expect(seen).toHaveLength(2);
      const byPath = Object.fromEntries(seen.map((s) => [s.path, s]));
      expect(byPath["/openapi/v1/images/generations"]).toEqual({
        path: "/openapi/v1/images/generations",
        body: imageBody(extra),
        key: `genrelay-${imgId}`,
      });
      expect(byPath["/openapi/v1/videos/generations"]).toEqual({
        path: "/openapi/v1/videos/generations",
        body: videoBody(extra),
        key: `genrelay-${vidId}`,
      });
    });
  });

  describe("creation: idempotency", () => {
    relayPerTest(open, seed);
    async function create(key: string, body: unknown, kind: Kind = "image", who = apiKey) {
      const res = await t.request(who, PATHS[kind], { method: "POST", idempotencyKey: key, json: body });
      return { res, json: (await res.json()) as { data: { id: string }; error?: unknown } };
    }

    it("same key and same body: 200 with the original task and Idempotent-Replayed: true", async () => {
      const first = await create(KEY, imageBody({ metadata: { a: "1" } }));
      expect(first.res.status).toBe(201);
      t.clock.advance(5_000);
      const again = await create(KEY, imageBody({ metadata: { a: "1" } }));
      expect(again.res.status).toBe(200);
      expect(again.res.headers.get("idempotent-replayed")).toBe("true");
      expect(again.res.headers.get("location")).toBe(first.res.headers.get("location"));
      expect(again.json).toEqual(first.json);
      const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] };
      expect(list.data).toHaveLength(1);
    });

    it("the order of keys in the body does not matter", async () => {
      const first = await create(KEY, {
        model: "p-image",
        mode: "generate",
        prompt: "a red fox",
        count: 1,
        metadata: { a: "1", b: "2" },
      });
      const again = await create(KEY, {
        metadata: { b: "2", a: "1" },
        count: 1,
        prompt: "a red fox",
        mode: "generate",
        model: "p-image",
      });
      expect(again.res.status).toBe(200);
      expect(again.json.data.id).toBe(first.json.data.id);
    });

    it("replays with Idempotent-Replayed: true even after the task moved on", async () => {
      server.use(
        http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, () =>
          HttpResponse.json({ data: { id: "up_1", status: "processing" } }, { status: 201 }),
        ),
      );
      const first = await create(KEY, imageBody());
      await t.relay.submitter.runOnce();
      const again = await create(KEY, imageBody());
      expect(again.res.status).toBe(200);
      expect(again.json.data).toMatchObject({ id: first.json.data.id, status: "processing", upstream_task_id: "up_1" });
    });

    it.each([
      ["a different prompt", imageBody({ prompt: "a blue fox in snow" })],
      ["a different metadata", imageBody({ metadata: { a: "2" } })],
      ["a different callback_url", imageBody({ callback_url: "https://hooks.example.com/other" })],
      ["an extra unknown field", imageBody({ quality: "high" })],
    ])("same key and %s: 409 idempotency_key_reused", async (_label, body) => {
      expect((await create(KEY, imageBody())).res.status).toBe(201);
      const res = await t.request(apiKey, PATHS.image, { method: "POST", idempotencyKey: KEY, json: body });
      expect(res.status).toBe(409);
      expect(await res.json()).toEqual({
        error: { code: "idempotency_key_reused", message: expect.any(String), request_id: requestId },
      });
    });

    it("same key on the other endpoint: 409 (the type is part of the request)", async () => {
      expect((await create(KEY, imageBody())).res.status).toBe(201);
      const res = await create(KEY, videoBody(), "video");
      expect(res.res.status).toBe(409);
      expect(res.json).toEqual({
        error: { code: "idempotency_key_reused", message: expect.any(String), request_id: requestId },
      });
    });

    it("keys are scoped per client: another client's same key is an independent task", async () => {
      const other = (await t.client("other")).apiKey;
      const mine = await create(KEY, imageBody());
      const theirs = await create(KEY, imageBody(), "image", other);
      expect([mine.res.status, theirs.res.status]).toEqual([201, 201]);
      expect(theirs.res.headers.get("idempotent-replayed")).toBe("false");
      expect(theirs.json.data.id).not.toBe(mine.json.data.id);
      // And a different body under the same key is fine for the other client too.
      const theirsAgain = await create("another-key-1", imageBody({ prompt: "something else" }), "image", other);
      expect(theirsAgain.res.status).toBe(201);
    });

    it("a client's waiting-task limit answers 429 concurrent_limit with Retry-After, and a replay still works", async () => {
      const limited = (await t.client("limited", { maxWaiting: 1 })).apiKey;
      expect((await create(KEY, imageBody(), "image", limited)).res.status).toBe(201);
      const res = await t.request(limited, PATHS.image, {
        method: "POST",
        idempotencyKey: "second-key-1",
        json: imageBody(),
      });
      expect(res.status).toBe(429);
      expect(res.headers.get("retry-after")).toBe("5");
      expect(await res.json()).toEqual({
        error: { code: "concurrent_limit", message: expect.any(String), request_id: requestId },
      });
      expect((await create(KEY, imageBody(), "image", limited)).res.status).toBe(200);
    });

    it("a rejected request does not consume the key", async () => {
      expect((await create(KEY, imageBody({ prompt: "x" }))).res.status).toBe(422);
      const ok = await create(KEY, imageBody());
      expect(ok.res.status).toBe(201);
    });
  });
});

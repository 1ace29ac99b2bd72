import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { delay, http, HttpResponse } from "msw";
import { fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UpstreamClient, type UpstreamClientOptions } from "../../src/upstream/client.js";
import { UpstreamError, isConcurrentLimit, isRateLimit } from "../../src/upstream/errors.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startStreamingUpstream } from "../helpers/hostile.js";
import { viaGlobalFetch } from "../helpers/relay.js";
import { mswServer } from "../helpers/upstream-suite.js";
import { turnCounter } from "../helpers/turn-counter.js";

const BASE = "https://upstream.test";
const API_KEY = "sk_live_0123456789abcdef_secret";
const KEY = "task_01JABCDEF:upstream-1";

const server = mswServer();

function client(overrides: Partial<UpstreamClientOptions> = {}): UpstreamClient {
  return new UpstreamClient({ baseUrl: BASE, apiKey: API_KEY, fetch: viaGlobalFetch, timeoutMs: 2_000, ...overrides });
}

async function failure(promise: Promise<unknown>): Promise<UpstreamError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof UpstreamError) return err;
    throw err;
  }
  throw new Error("expected the call to fail");
}

/** Every public field of an UpstreamError, so a test asserts the whole error. */
function fields(e: UpstreamError) {
  return {
    kind: e.kind,
    status: e.status,
    code: e.code,
    message: e.message,
    requestId: e.requestId,
    retryAfterMs: e.retryAfterMs,
    retryable: e.retryable,
    details: e.details,
  };
}

const imageBody = { model: "img-model-p", mode: "generate", prompt: "a red fox", count: 1 };

describe("createTask", () => {
  it("POSTs the image body with the documented headers and reads a 201", async () => {
    let seen: Request | undefined;
    server.use(
      http.post(`${BASE}/openapi/v1/images/generations`, ({ request }) => {
        seen = request.clone();
        return HttpResponse.json(
          { data: { id: "up_1", status: "queued" } },
          {
            status: 201,
            headers: {
              Location: `${BASE}/openapi/v1/tasks/up_1`,
              "Idempotent-Replayed": "false",
              "X-Request-Id": "req_create_1",
            },
          },
        );
      }),
    );

    const result = await client({ userAgent: "genrelay-test/1" }).createTask("image", imageBody, KEY);

    expect(result).toEqual({
      task: {
        id: "up_1",
        status: "queued",
        output: null,
        usage: { pointsCharged: null, pointsRefunded: null },
        error: null,
        raw: { data: { id: "up_1", status: "queued" } },
      },
      replayed: false,
      httpStatus: 201,
      requestId: "req_create_1",
    });
    expect(seen?.method).toBe("POST");
    expect(seen?.headers.get("authorization")).toBe(`Bearer ${API_KEY}`);
    expect(seen?.headers.get("content-type")).toBe("application/json");
    expect(seen?.headers.get("idempotency-key")).toBe(KEY);
    expect(seen?.headers.get("accept")).toBe("application/json");
    expect(seen?.headers.get("user-agent")).toBe("genrelay-test/1");
    expect(await seen?.json()).toEqual(imageBody);
  });

  it("POSTs a video task to videos/generations", async () => {
    let path = "";
    server.use(
      http.post(`${BASE}/openapi/v1/videos/generations`, ({ request }) => {
        path = new URL(request.url).pathname;
        return HttpResponse.json({ data: { id: "up_v", status: "queued" } }, { status: 201 });
      }),
    );
    const body = { model: "vid-model-v", video_mode: "t2v", prompt: "waves", duration: 5 };
    const result = await client().createTask("video", body, KEY);
    expect(path).toBe("/openapi/v1/videos/generations");
    expect(result.task.id).toBe("up_v");
    expect(result.replayed).toBe(false);
    expect(result.requestId).toBeNull();
  });

  it("tolerates a trailing slash on baseUrl", async () => {
    server.use(
      http.post(`${BASE}/openapi/v1/images/generations`, () =>
        HttpResponse.json({ data: { id: "up_s", status: "queued" } }, { status: 201 }),
      ),
    );
    const result = await client({ baseUrl: `${BASE}/` }).createTask("image", imageBody, KEY);
    expect(result.task.id).toBe("up_s");
  });

  it("reads a 200 replay with Idempotent-Replayed: true as the original task", async () => {
    server.use(
      http.post(`${BASE}/openapi/v1/images/generations`, () =>
        HttpResponse.json(
          { data: { id: "up_1", status: "succeeded" }, output: { images: ["u"] }, usage: { points_charged: 20 } },
          { status: 200, headers: { "Idempotent-Replayed": "true", Location: `${BASE}/openapi/v1/tasks/up_1` } },
        ),
      ),
    );
    const result = await client().createTask("image", imageBody, KEY);
    expect(result).toMatchObject({
      replayed: true,
      httpStatus: 200,
      task: { id: "up_1", status: "succeeded", output: { images: ["u"] }, usage: { pointsCharged: 20 } },
    });
  });

  it("reads a bare 200 as a replay, and trusts an explicit header over the status", async () => {
    server.use(
      http.post(`${BASE}/openapi/v1/images/generations`, () =>
        HttpResponse.json({ data: { id: "up_1", status: "queued" } }, { status: 200 }),
      ),
      http.post(`${BASE}/openapi/v1/videos/generations`, () =>
        HttpResponse.json(
          { data: { id: "up_2", status: "queued" } },
          { status: 201, headers: { "Idempotent-Replayed": "TRUE" } },
        ),
      ),
    );
    expect((await client().createTask("image", imageBody, KEY)).replayed).toBe(true);
    expect((await client().createTask("video", { prompt: "abc" }, KEY)).replayed).toBe(true);
  });

  it("uses an injected fetch instead of the global one", async () => {
    const calls: string[] = [];
    const fakeFetch: typeof fetch = async (input) => {
      calls.push(String(input));
      return new Response(JSON.stringify({ id: "up_f", status: "pending" }), { status: 201 });
    };
    const result = await client({ fetch: fakeFetch }).createTask("image", imageBody, KEY);
    expect(calls).toEqual([`${BASE}/openapi/v1/images/generations`]);
    expect(result.task).toMatchObject({ id: "up_f", status: "queued" });
  });
});

interface ErrorRow {
  name: string;
  status: number;
  body: string | Record<string, unknown>;
  headers?: Record<string, string>;
  expected: Omit<ReturnType<typeof fields>, "kind" | "status">;
  concurrent?: boolean;
  rate?: boolean;
}

const envelope = (code: string, message: string, request_id: string, details?: unknown) => ({
  error: { code, message, request_id, ...(details === undefined ? {} : { details }) },
});

const now = Date.UTC(2026, 0, 1, 12, 0, 0);

/** docs/upstream.md, "Errors", row by row. */
const errorRows: ErrorRow[] = [
  {
    name: "400 invalid_request",
    status: 400,
    body: envelope("invalid_request", "count must be 1", "req_400a"),
    expected: {
      code: "invalid_request",
      message: "count must be 1",
      requestId: "req_400a",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "400 invalid_media_url",
    status: 400,
    body: envelope("invalid_media_url", "image_urls[0] is not reachable", "req_400b"),
    expected: {
      code: "invalid_media_url",
      message: "image_urls[0] is not reachable",
      requestId: "req_400b",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "401 invalid_api_key",
    status: 401,
    body: envelope("invalid_api_key", "API key revoked", "req_401"),
    expected: {
      code: "invalid_api_key",
      message: "API key revoked",
      requestId: "req_401",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "402 insufficient_points",
    status: 402,
    body: envelope("insufficient_points", "balance too low", "req_402a"),
    expected: {
      code: "insufficient_points",
      message: "balance too low",
      requestId: "req_402a",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "402 membership_required",
    status: 402,
    body: envelope("membership_required", "upgrade required", "req_402b"),
    expected: {
      code: "membership_required",
      message: "upgrade required",
      requestId: "req_402b",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "409 idempotency_key_reused",
    status: 409,
    body: envelope("idempotency_key_reused", "key used for a different request", "req_409"),
    expected: {
      code: "idempotency_key_reused",
      message: "key used for a different request",
      requestId: "req_409",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "422 validation_error with details",
    status: 422,
    body: envelope("validation_error", "invalid fields", "req_422", [
      { field: "duration", issue: "unsupported for this model" },
    ]),
    expected: {
      code: "validation_error",
      message: "invalid fields",
      requestId: "req_422",
      retryAfterMs: null,
      retryable: false,
      details: [{ field: "duration", issue: "unsupported for this model" }],
    },
  },
  {
    name: "429 rate_limit with Retry-After seconds",
    status: 429,
    body: envelope("rate_limit", "slow down", "req_429a"),
    headers: { "Retry-After": "17" },
    rate: true,
    expected: {
      code: "rate_limit",
      message: "slow down",
      requestId: "req_429a",
      retryAfterMs: 17_000,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "429 rate_limit with Retry-After as an HTTP-date",
    status: 429,
    body: envelope("rate_limit", "slow down", "req_429b"),
    headers: { "Retry-After": new Date(now + 90_000).toUTCString() },
    rate: true,
    expected: {
      code: "rate_limit",
      message: "slow down",
      requestId: "req_429b",
      retryAfterMs: 90_000,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "429 rate_limit with a Retry-After beyond the one-hour cap",
    status: 429,
    body: envelope("rate_limit", "slow down", "req_429c"),
    headers: { "Retry-After": "999999" },
    rate: true,
    expected: {
      code: "rate_limit",
      message: "slow down",
      requestId: "req_429c",
      retryAfterMs: 3_600_000,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "429 without a code (counts as rate_limit)",
    status: 429,
    body: "",
    headers: { "Retry-After": "5", "X-Request-Id": "req_hdr_429" },
    rate: true,
    expected: {
      code: "http_429",
      message: "upstream responded with HTTP 429",
      requestId: "req_hdr_429",
      retryAfterMs: 5_000,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "429 concurrent_limit",
    status: 429,
    body: envelope("concurrent_limit", "too many running tasks", "req_429d"),
    concurrent: true,
    expected: {
      code: "concurrent_limit",
      message: "too many running tasks",
      requestId: "req_429d",
      retryAfterMs: null,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "500 internal_error",
    status: 500,
    body: envelope("internal_error", "unexpected", "req_500"),
    expected: {
      code: "internal_error",
      message: "unexpected",
      requestId: "req_500",
      retryAfterMs: null,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "503 service_unavailable with Retry-After",
    status: 503,
    body: envelope("service_unavailable", "maintenance", "req_503"),
    headers: { "Retry-After": "30" },
    expected: {
      code: "service_unavailable",
      message: "maintenance",
      requestId: "req_503",
      retryAfterMs: 30_000,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "400 with code and message at the top level",
    status: 400,
    body: { code: "invalid_request", message: "prompt too short", request_id: "req_flat" },
    expected: {
      code: "invalid_request",
      message: "prompt too short",
      requestId: "req_flat",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
  {
    name: "502 with an HTML body from a proxy",
    status: 502,
    body: "<html><body>Bad Gateway</body></html>",
    expected: {
      code: "http_502",
      message: "<html><body>Bad Gateway</body></html>",
      requestId: null,
      retryAfterMs: null,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "408 with an empty body",
    status: 408,
    body: "",
    expected: {
      code: "http_408",
      message: "upstream responded with HTTP 408",
      requestId: null,
      retryAfterMs: null,
      retryable: true,
      details: undefined,
    },
  },
  {
    name: "403 with an empty body",
    status: 403,
    body: "",
    headers: { "X-Request-Id": "req_403" },
    expected: {
      code: "http_403",
      message: "upstream responded with HTTP 403",
      requestId: "req_403",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    },
  },
];

function respond(row: {
  status: number;
  body: string | Record<string, unknown>;
  headers?: Record<string, string>;
}): Response {
  if (typeof row.body === "string") {
    return new HttpResponse(row.body, { status: row.status, headers: row.headers });
  }
  return HttpResponse.json(row.body, { status: row.status, headers: row.headers });
}

describe('error responses (docs/upstream.md, "Errors")', () => {
  it.each(errorRows)("$name", async (row) => {
    server.use(http.post(`${BASE}/openapi/v1/images/generations`, () => respond(row)));
    const e = await failure(client({ clock: new FakeClock(now) }).createTask("image", imageBody, KEY));

    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe("UpstreamError");
    expect(fields(e)).toEqual({ kind: "http", status: row.status, ...row.expected });
    expect(e.toInfo()).toEqual({
      code: row.expected.code,
      message: row.expected.message,
      request_id: row.expected.requestId,
    });
    expect(isConcurrentLimit(e)).toBe(row.concurrent === true);
    expect(isRateLimit(e)).toBe(row.rate === true);
  });

  it("404 task_not_found on a task read", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks/:id`, () =>
        HttpResponse.json(envelope("task_not_found", "no such task", "req_404"), { status: 404 }),
      ),
    );
    const e = await failure(client().getTask("up_missing"));
    expect(fields(e)).toEqual({
      kind: "http",
      status: 404,
      code: "task_not_found",
      message: "no such task",
      requestId: "req_404",
      retryAfterMs: null,
      retryable: false,
      details: undefined,
    });
  });

  it("prefers the body's request_id to the X-Request-Id header", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks/:id`, () =>
        HttpResponse.json(envelope("internal_error", "x", "req_body"), {
          status: 500,
          headers: { "X-Request-Id": "req_header" },
        }),
      ),
    );
    expect((await failure(client().getTask("t"))).requestId).toBe("req_body");
  });

  it("never carries the API key in an error message, even when the upstream echoes it", async () => {
    server.use(
      http.post(`${BASE}/openapi/v1/images/generations`, () =>
        HttpResponse.json(envelope("invalid_api_key", `key ${API_KEY} was revoked`, "req_k"), { status: 401 }),
      ),
      http.get(`${BASE}/openapi/v1/models`, () => new HttpResponse(`bad key: Bearer ${API_KEY}`, { status: 401 })),
    );
    const e1 = await failure(client().createTask("image", imageBody, KEY));
    expect(e1.message).toBe("key [redacted] was revoked");
    const e2 = await failure(client().getModels());
    expect(e2.message).toBe("bad key: Bearer [redacted]");
    expect(JSON.stringify(e2.toInfo())).not.toContain(API_KEY);
  });
});

describe("transport failures", () => {
  it("a network error is kind network, retryable, without the key", async () => {
    server.use(http.post(`${BASE}/openapi/v1/images/generations`, () => HttpResponse.error()));
    const e = await failure(client().createTask("image", imageBody, KEY));
    expect(fields(e)).toMatchObject({
      kind: "network",
      status: null,
      code: "network_error",
      requestId: null,
      retryAfterMs: null,
      retryable: true,
    });
    expect(e.message).toMatch(/^POST \/openapi\/v1\/images\/generations failed: /);
    expect(e.message).not.toContain(API_KEY);
    expect(e.toInfo()).toEqual({ code: "network_error", message: e.message, request_id: null });
  });

  it("a response slower than timeoutMs is kind timeout", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks/:id`, async () => {
        await delay(2_000);
        return HttpResponse.json({ data: { id: "late", status: "queued" } });
      }),
    );
    const started = Date.now();
    const e = await failure(client({ timeoutMs: 50 }).getTask("late"));
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(fields(e)).toEqual({
      kind: "timeout",
      status: null,
      code: "timeout",
      message: "GET /openapi/v1/tasks/late timed out after 50 ms",
      requestId: null,
      retryAfterMs: null,
      retryable: true,
      details: undefined,
    });
  });

  it("a body that stalls after the headers also times out", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/models`, () => {
        const stream = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(new TextEncoder().encode('{"models":['));
            // never closed: the rest of the body does not arrive
          },
        });
        return new HttpResponse(stream, { status: 200, headers: { "Content-Type": "application/json" } });
      }),
    );
    const e = await failure(client({ timeoutMs: 100 }).getModels());
    expect(e.kind).toBe("timeout");
    expect(e.retryable).toBe(true);
  });
});

describe("transport failures against a real socket (undici, not msw)", () => {
  let httpServer: Server;
  let baseUrl = "";
  // msw patches the global fetch; undici's own fetch goes to the network for real.
  const realFetch = undiciFetch as unknown as typeof fetch;

  beforeAll(async () => {
    httpServer = createServer((req, res) => {
      if (req.url?.startsWith("/openapi/v1/tasks/slow")) return; // never answers
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ data: { id: "real", status: "running" } }));
    });
    await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve));
    baseUrl = `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    httpServer.closeAllConnections();
    await new Promise<void>((resolve) => httpServer.close(() => resolve()));
  });

  it("reads a task over a real connection", async () => {
    const task = await client({ baseUrl, fetch: realFetch }).getTask("real");
    expect(task).toMatchObject({ id: "real", status: "processing" });
  });

  it("times out on a server that never answers", async () => {
    const e = await failure(client({ baseUrl, fetch: realFetch, timeoutMs: 100 }).getTask("slow"));
    expect(e.kind).toBe("timeout");
  });

  it("a refused connection is a network error", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const e = await failure(client({ baseUrl: `http://127.0.0.1:${port}`, fetch: realFetch }).getModels());
    expect(e.kind).toBe("network");
    expect(e.retryable).toBe(true);
    expect(e.message).toContain("ECONNREFUSED");
  });

  it("an injected fetch that ignores the signal still times out", async () => {
    const hanging: typeof fetch = () => new Promise<Response>(() => undefined);
    const e = await failure(client({ fetch: hanging, timeoutMs: 50 }).getModels());
    expect(e.kind).toBe("timeout");
  });
});

describe("malformed 2xx responses", () => {
  it.each([
    ["non-JSON 201", 201, "<html>ok</html>", "response body is not JSON"],
    ["empty 201", 201, "", "response body is not JSON"],
    ["201 without an id", 201, JSON.stringify({ data: { status: "queued" } }), "creation response carries no task id"],
    ["201 with a JSON array", 201, "[]", "creation response carries no task id"],
  ])("%s on creation", async (_name, status, body, why) => {
    server.use(
      http.post(
        `${BASE}/openapi/v1/images/generations`,
        () => new HttpResponse(body, { status, headers: { "X-Request-Id": "req_m" } }),
      ),
    );
    const e = await failure(client().createTask("image", imageBody, KEY));
    expect(fields(e)).toEqual({
      kind: "malformed",
      status: null,
      code: "malformed_response",
      message: `malformed upstream response (HTTP ${status}): ${why}`,
      requestId: "req_m",
      retryAfterMs: null,
      retryable: true,
      details: { httpStatus: status },
    });
  });

  it("a non-object task read is malformed", async () => {
    server.use(http.get(`${BASE}/openapi/v1/tasks/:id`, () => HttpResponse.json(["up_1"])));
    const e = await failure(client().getTask("up_1"));
    expect(e.kind).toBe("malformed");
    expect(e.code).toBe("malformed_response");
  });

  it("non-JSON list and models bodies are malformed", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks`, () => new HttpResponse("oops", { status: 200 })),
      http.get(`${BASE}/openapi/v1/models`, () => new HttpResponse("", { status: 200 })),
    );
    expect((await failure(client().listTasks({}))).kind).toBe("malformed");
    expect((await failure(client().getModels())).kind).toBe("malformed");
  });
});

describe("getTask", () => {
  it("GETs the URL-encoded id without body headers and reads the task", async () => {
    let seen: Request | undefined;
    const body = {
      data: { id: "up/1 x", status: "SUCCEEDED" },
      output: { video_url: "https://cdn.example/v.mp4" },
      usage: { points_charged: 750, points_refunded: 0 },
    };
    server.use(
      http.get(`${BASE}/openapi/v1/tasks/*`, ({ request }) => {
        seen = request;
        return HttpResponse.json(body);
      }),
    );
    const task = await client().getTask("up/1 x?y");
    expect(new URL(seen?.url ?? "").pathname).toBe("/openapi/v1/tasks/up%2F1%20x%3Fy");
    expect(seen?.method).toBe("GET");
    expect(seen?.headers.get("authorization")).toBe(`Bearer ${API_KEY}`);
    expect(seen?.headers.get("content-type")).toBeNull();
    expect(seen?.headers.get("idempotency-key")).toBeNull();
    expect(task).toEqual({
      id: "up/1 x",
      status: "succeeded",
      output: { video_url: "https://cdn.example/v.mp4" },
      usage: { pointsCharged: 750, pointsRefunded: 0 },
      error: null,
      raw: body,
    });
  });

  it("keeps an unknown status as null and falls back to the requested id", async () => {
    server.use(http.get(`${BASE}/openapi/v1/tasks/:id`, () => HttpResponse.json({ status: "warming" })));
    expect(await client().getTask("up_9")).toEqual({
      id: "up_9",
      status: null,
      output: null,
      usage: { pointsCharged: null, pointsRefunded: null },
      error: null,
      raw: { status: "warming" },
    });
  });

  it("reads a failed task's error and refund", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks/:id`, () =>
        HttpResponse.json({
          data: {
            id: "up_f",
            status: "failed",
            error: { code: "content_policy", message: "rejected", request_id: "req_f" },
          },
          usage: { points_charged: 40, points_refunded: 40 },
        }),
      ),
    );
    expect(await client().getTask("up_f")).toMatchObject({
      status: "failed",
      usage: { pointsCharged: 40, pointsRefunded: 40 },
      error: { code: "content_policy", message: "rejected", request_id: "req_f" },
    });
  });

  it("refuses an empty id instead of reading the list", async () => {
    await expect(client().getTask("")).rejects.toThrow(TypeError);
  });
});

describe("listTasks", () => {
  it("sends only the given query parameters", async () => {
    const queries: string[] = [];
    server.use(
      http.get(`${BASE}/openapi/v1/tasks`, ({ request }) => {
        queries.push(new URL(request.url).search);
        return HttpResponse.json({ data: [] });
      }),
    );
    await client().listTasks({ limit: 50, cursor: "c/1=", type: "video", status: "processing" });
    await client().listTasks({});
    expect(queries).toEqual(["?limit=50&cursor=c%2F1%3D&type=video&status=processing", ""]);
  });

  it.each([
    ["data as an array with next_cursor", { data: [{ id: "a", status: "queued" }], next_cursor: "n2" }, "n2"],
    ["data.items", { data: { items: [{ id: "a", status: "queued" }], next_cursor: null } }, null],
    ["data.tasks", { data: { tasks: [{ data: { id: "a", status: "queued" } }] } }, null],
    ["items with cursor.next", { items: [{ task_id: "a", status: "pending" }], cursor: { next: "n3" } }, "n3"],
    ["tasks with next", { tasks: [{ id: "a", status: "queued" }], next: "n4" }, "n4"],
  ])("reads %s", async (_name, body, next) => {
    server.use(http.get(`${BASE}/openapi/v1/tasks`, () => HttpResponse.json(body)));
    const page = await client().listTasks({ limit: 10 });
    expect(page?.tasks.map((t) => [t.id, t.status])).toEqual([["a", "queued"]]);
    expect(page?.nextCursor).toBe(next);
  });

  it("returns null for a body it does not understand", async () => {
    server.use(http.get(`${BASE}/openapi/v1/tasks`, () => HttpResponse.json({ results: [{ id: "a" }], total: 1 })));
    expect(await client().listTasks({})).toBeNull();
  });

  it("passes a 429 through as a rate limit", async () => {
    server.use(
      http.get(`${BASE}/openapi/v1/tasks`, () =>
        HttpResponse.json(envelope("rate_limit", "120 reads per minute", "req_l"), {
          status: 429,
          headers: { "Retry-After": "12" },
        }),
      ),
    );
    const e = await failure(client().listTasks({}));
    expect(isRateLimit(e)).toBe(true);
    expect(e.retryAfterMs).toBe(12_000);
  });
});

describe("getModels", () => {
  it("returns the catalog verbatim", async () => {
    const catalog = {
      image: [{ id: "img-model-p", sizes: ["1K", "2K", "4K"], extra: { nested: [null, true] } }],
      video: [{ id: "vid-model-v", durations: [5, 10], modes: ["t2v", "i2v_first"] }],
    };
    let seen: Request | undefined;
    server.use(
      http.get(`${BASE}/openapi/v1/models`, ({ request }) => {
        seen = request;
        return HttpResponse.json(catalog);
      }),
    );
    expect(await client().getModels()).toEqual(catalog);
    expect(seen?.headers.get("authorization")).toBe(`Bearer ${API_KEY}`);
  });

  it("returns a top-level array verbatim too", async () => {
    server.use(http.get(`${BASE}/openapi/v1/models`, () => HttpResponse.json([{ id: "m" }])));
    expect(await client().getModels()).toEqual([{ id: "m" }]);
  });
});

describe("construction", () => {
  it("rejects an empty key, empty base URL and a non-positive timeout", () => {
    expect(() => new UpstreamClient({ baseUrl: BASE, apiKey: "" })).toThrow(TypeError);
    expect(() => new UpstreamClient({ baseUrl: " ", apiKey: API_KEY })).toThrow(TypeError);
    expect(() => new UpstreamClient({ baseUrl: BASE, apiKey: API_KEY, timeoutMs: 0 })).toThrow(RangeError);
  });
});

describe('UPSTREAM_MAX_BODY_BYTES: a body over the limit is refused while it streams (docs/contract.md, "Upstream answers")', () => {
  const realFetch = undiciFetch as unknown as typeof fetch;
  const MiB = 1024 * 1024;

  it("a 50 MB task read is cut off at the limit over a real socket, memory bounded, not retryable", async () => {
    const up = await startStreamingUpstream(50 * MiB);
    try {
      const before = process.memoryUsage();
      const e = await failure(
        client({ baseUrl: up.url, fetch: realFetch, timeoutMs: 10_000, maxBodyBytes: 1 * MiB }).getTask("big"),
      );
      const after = process.memoryUsage();
      expect(fields(e)).toEqual({
        kind: "malformed",
        status: 200,
        code: "response_too_large",
        message: `upstream response (HTTP 200) is larger than UPSTREAM_MAX_BODY_BYTES (${MiB} bytes); it was not read`,
        requestId: null,
        retryAfterMs: null,
        retryable: false,
        details: { httpStatus: 200, limitBytes: MiB },
      });
      // The read stopped at the limit: the server never got to write the body (socket buffers aside).
      await expect.poll(() => up.closedEarly()).toBe(true);
      expect(up.written()).toBeLessThan(16 * MiB);
      // Nothing near 50 MB was ever held (buffers included).
      expect(after.arrayBuffers + after.external - before.arrayBuffers - before.external).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
    }
  });

  it("a declared Content-Length over the limit is refused before the body is read", async () => {
    const up = await startStreamingUpstream(50 * MiB, { contentLength: true });
    try {
      const e = await failure(
        client({ baseUrl: up.url, fetch: realFetch, timeoutMs: 10_000, maxBodyBytes: 1 * MiB }).getTask("big"),
      );
      expect(e.code).toBe("response_too_large");
      await expect.poll(() => up.closedEarly()).toBe(true);
      expect(up.written()).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
    }
  });

  it("an error answer is read only as far as its message: a 50 MB 502 stays a retryable http error", async () => {
    const up = await startStreamingUpstream(50 * MiB, { status: 502 });
    try {
      const e = await failure(client({ baseUrl: up.url, fetch: realFetch, timeoutMs: 10_000 }).getTask("big"));
      expect(e.kind).toBe("http");
      expect(e.status).toBe(502);
      expect(e.retryable).toBe(true);
      expect(e.message.length).toBeLessThan(400);
      expect(up.written()).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
    }
  });

  it("a streamed list page over the limit (msw) stops pulling the stream", async () => {
    let pulled = 0;
    server.use(
      http.get(`${BASE}/openapi/v1/tasks`, () => {
        const stream = new ReadableStream<Uint8Array>({
          pull(controller) {
            pulled += 1;
            if (pulled === 1) controller.enqueue(new TextEncoder().encode('{"data":['));
            else if (pulled > 800) controller.close();
            else
              controller.enqueue(
                new TextEncoder().encode(
                  `${JSON.stringify({ id: `t${pulled}`, status: "running", output: "x".repeat(64 * 1024) })},`,
                ),
              );
          },
        });
        return new HttpResponse(stream, { status: 200, headers: { "Content-Type": "application/json" } });
      }),
    );
    const e = await failure(client({ maxBodyBytes: 1 * MiB }).listTasks({}));
    expect(e.code).toBe("response_too_large");
    expect(pulled).toBeLessThan(100);
  });

  it("a body exactly at the limit is read", async () => {
    const body = JSON.stringify({ data: { id: "ok", status: "succeeded" }, output: { text: "b".repeat(2000) } });
    server.use(http.get(`${BASE}/openapi/v1/tasks/ok`, () => new HttpResponse(body, { status: 200 })));
    const task = await client({ maxBodyBytes: Buffer.byteLength(body) }).getTask("ok");
    expect(task.status).toBe("succeeded");
  });
});

describe("calls share each turn of the event loop (issue #38 item 7: next-turn.ts, TurnTime)", () => {
  it("forty calls started together start at most a turn's worth of work a turn, and all answer", async () => {
    const loop = turnCounter();
    const startedIn: number[] = [];
    // Each call's start costs 1 ms of this thread (a stand-in for building and sending a request).
    const busyFetch: typeof fetch = async () => {
      startedIn.push(loop.now());
      const until = performance.now() + 1;
      while (performance.now() < until) {}
      return Response.json({ data: { id: "t-1", status: "SUCCEEDED" } });
    };
    const c = client({ fetch: busyFetch });
    try {
      const tasks = await Promise.all(Array.from({ length: 40 }, () => c.getTask("t-1")));
      expect(tasks.map((t) => t.status)).toEqual(Array(40).fill("succeeded"));
    } finally {
      loop.stop();
    }
    const perTurn = new Map<number, number>();
    for (const t of startedIn) perTurn.set(t, (perTurn.get(t) ?? 0) + 1);
    // 40 ms of starts in 10 ms turns: never all in one turn, at most about 10 in any.
    expect(Math.max(...perTurn.values())).toBeLessThanOrEqual(12);
    expect(perTurn.size).toBeGreaterThanOrEqual(4);
  });
});

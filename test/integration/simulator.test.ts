import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createSimulator } from "../../src/simulator/app.js";
import type { SimulatorOptions } from "../../src/simulator/options.js";
import { startSimulator } from "../../src/simulator/server.js";
import { FakeClock } from "../helpers/fake-clock.js";

const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const BASE = "http://simulator.local";
const IMAGE = "/openapi/v1/images/generations";
const VIDEO = "/openapi/v1/videos/generations";

const imageBody = (extra: Record<string, unknown> = {}) => ({
  model: "p-image",
  mode: "generate",
  prompt: "a red fox in snow",
  count: 1,
  ...extra,
});
const videoBody = (extra: Record<string, unknown> = {}) => ({
  model: "v-video",
  video_mode: "t2v",
  prompt: "waves at dusk",
  ...extra,
});

let keySeq = 0;
const newKey = () => `test-key-${++keySeq}`;

function setup(options: SimulatorOptions = {}) {
  const clock = new FakeClock(T0);
  const { app, state } = createSimulator({ clock, ...options });

  const post = (
    path: string,
    body: unknown,
    opts: { key?: string | null; idem?: string | null; headers?: Record<string, string> } = {},
  ) => {
    const headers: Record<string, string> = { "content-type": "application/json", ...opts.headers };
    if (opts.key !== null) headers.authorization = `Bearer ${opts.key ?? "sandbox"}`;
    if (opts.idem !== null) headers["idempotency-key"] = opts.idem ?? newKey();
    return app.request(path, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
  };
  const get = (path: string, key: string | null = "sandbox") =>
    app.request(path, { headers: key === null ? {} : { authorization: `Bearer ${key}` } });
  const createImage = async (extra: Record<string, unknown> = {}, key = "sandbox") => {
    const res = await post(IMAGE, imageBody(extra), { key });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  };
  const createVideo = async (extra: Record<string, unknown> = {}, key = "sandbox") => {
    const res = await post(VIDEO, videoBody(extra), { key });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  };
  const balance = () => state.stats().per_account.sandbox!.balance;
  return { clock, app, state, post, get, createImage, createVideo, balance };
}

/** The whole error body, with request_id tied to the X-Request-Id header. */
async function expectError(res: Response, status: number, code: string, details?: unknown[]) {
  const body = await res.json();
  expect(res.status).toBe(status);
  const requestId = res.headers.get("x-request-id");
  expect(requestId).toMatch(/^req_\w+$/);
  const error: Record<string, unknown> = { code, message: expect.any(String), request_id: requestId };
  if (details) error.details = details;
  expect(body).toEqual({ error });
}

const iso = (ms: number) => new Date(ms).toISOString();

/** A task's data as the simulator shows it, created at T0 and last changed at `updated`. */
const taskData = (
  task: { id: string; status: string; type: "image" | "video"; model: string },
  updated: number,
  completed: number | null,
) => ({
  ...task,
  created_at: iso(T0),
  updated_at: iso(updated),
  completed_at: completed === null ? null : iso(completed),
});

describe("authentication", () => {
  const routes: [string, string][] = [
    ["GET", "/openapi/v1/models"],
    ["GET", "/openapi/v1/tasks"],
    ["GET", "/openapi/v1/tasks/up_whatever"],
    ["POST", IMAGE],
    ["POST", VIDEO],
  ];
  for (const [method, path] of routes) {
    it(`${method} ${path}: missing, unknown or non-Bearer key is 401 invalid_api_key`, async () => {
      const { app } = setup();
      for (const authorization of [undefined, "Bearer nope", "Basic sandbox", "sandbox", "Bearer "]) {
        const headers: Record<string, string> = { "content-type": "application/json", "idempotency-key": newKey() };
        if (authorization !== undefined) headers.authorization = authorization;
        const res = await app.request(path, {
          method,
          headers,
          ...(method === "POST" ? { body: JSON.stringify(imageBody()) } : {}),
        });
        await expectError(res, 401, "invalid_api_key");
      }
    });
  }

  it("accepts a second configured account and keeps its tasks apart (cross-account 404)", async () => {
    const { get, createImage, state } = setup({ accounts: [{ apiKey: "sandbox" }, { apiKey: "other" }] });
    const id = await createImage();
    await expectError(await get(`/openapi/v1/tasks/${id}`, "other"), 404, "task_not_found");
    expect(((await (await get("/openapi/v1/tasks", "other")).json()) as { data: unknown[] }).data).toEqual([]);
    expect((await get(`/openapi/v1/tasks/${id}`)).status).toBe(200);
    state.addAccount({ apiKey: "third" });
    expect((await get("/openapi/v1/models", "third")).status).toBe(200);
  });
});

describe("request validation", () => {
  /** The whole verdict on a request whose Idempotency-Key is missing or malformed. */
  const invalidKey = (message: string) => ({
    status: 400,
    code: "invalid_request",
    details: [{ field: "Idempotency-Key", message }],
  });
  /** The whole verdict on a body with one invalid field. */
  const invalidField = (field: string, message: string) => ({
    status: 422,
    code: "validation_error",
    details: [{ field, message }],
  });
  /** The whole verdict on a media URL that is not public https. */
  const notPublicHttps = (field: string) => ({
    status: 400,
    code: "invalid_media_url",
    details: [{ field, message: "must be a public https URL" }],
  });
  const keyRule = "must be 8 to 128 characters of A-Z a-z 0-9 . _ : -";
  type Case = {
    name: string;
    path?: string;
    body?: unknown;
    idem?: string | null;
    headers?: Record<string, string>;
    status: number;
    code: string;
    details?: unknown[];
  };
  const cases: Case[] = [
    { name: "missing Idempotency-Key", idem: null, ...invalidKey("is required") },
    { name: "Idempotency-Key too short", idem: "short", ...invalidKey(keyRule) },
    { name: "Idempotency-Key too long", idem: "k".repeat(129), ...invalidKey(keyRule) },
    { name: "Idempotency-Key with a space", idem: "abc def ghi", ...invalidKey(keyRule) },
    { name: "Idempotency-Key with a slash", idem: "abc/def/ghi", ...invalidKey(keyRule) },
    { name: "malformed JSON", body: '{"model":', status: 400, code: "invalid_request" },
    { name: "empty body", body: "", status: 400, code: "invalid_request" },
    { name: "JSON array body", body: "[]", status: 400, code: "invalid_request" },
    { name: "JSON null body", body: "null", status: 400, code: "invalid_request" },
    { name: "JSON string body", body: '"hello"', status: 400, code: "invalid_request" },
    { name: "non-JSON content type", headers: { "content-type": "text/plain" }, status: 400, code: "invalid_request" },
    { name: "missing model", body: imageBody({ model: undefined }), ...invalidField("model", "is required") },
    {
      name: "unknown model",
      body: imageBody({ model: "dall-x" }),
      ...invalidField("model", "is not an image model of the catalog"),
    },
    {
      name: "video model on the image endpoint",
      body: imageBody({ model: "v-video" }),
      ...invalidField("model", "is not an image model of the catalog"),
    },
    { name: "numeric model", body: imageBody({ model: 7 }), ...invalidField("model", "must be a non-empty string") },
    {
      name: "unknown mode",
      body: imageBody({ mode: "paint" }),
      ...invalidField("mode", "is not supported by this model; one of generate, edit"),
    },
    {
      name: "prompt of 2 visible characters",
      body: imageBody({ prompt: " a \n b " }),
      ...invalidField("prompt", "must contain at least 3 non-whitespace characters"),
    },
    { name: "missing prompt", body: imageBody({ prompt: undefined }), ...invalidField("prompt", "is required") },
    { name: "count 2", body: imageBody({ count: 2 }), ...invalidField("count", "must be 1") },
    { name: "count missing", body: imageBody({ count: undefined }), ...invalidField("count", "is required") },
    {
      name: "edit without image_urls",
      body: imageBody({ mode: "edit" }),
      ...invalidField("image_urls", "is required when mode is edit (at least one URL)"),
    },
    {
      name: "image_urls not an array",
      body: imageBody({ mode: "edit", image_urls: "https://x.test/a.png" }),
      ...invalidField("image_urls", "must be an array of URL strings"),
    },
    {
      name: "size not offered",
      body: imageBody({ size: "8K" }),
      ...invalidField("size", "is not a size of this model; one of 1K, 2K, 4K"),
    },
    {
      name: "unknown quality",
      body: imageBody({ quality: "ultra" }),
      ...invalidField("quality", "is not a quality of this model; one of low, medium, high, xhigh, max, auto"),
    },
    {
      name: "several bad fields at once",
      body: { model: "p-image", mode: "generate", prompt: "", count: 0 },
      status: 422,
      code: "validation_error",
      details: [
        { field: "prompt", message: "must contain at least 3 non-whitespace characters" },
        { field: "count", message: "must be 1" },
      ],
    },
    {
      name: "http image URL",
      body: imageBody({ mode: "edit", image_urls: ["https://ok.test/a.png", "http://x.test/a.png"] }),
      ...notPublicHttps("image_urls[1]"),
    },
    {
      name: "unparsable image URL",
      body: imageBody({ mode: "edit", image_urls: ["not a url"] }),
      ...notPublicHttps("image_urls[0]"),
    },
    // The video endpoint's own checks.
    ...(
      [
        {
          name: "video: missing video_mode",
          body: videoBody({ video_mode: undefined }),
          ...invalidField("video_mode", "is required"),
        },
        {
          name: "video: mode the model lacks",
          body: videoBody({ video_mode: "v2v_edit" }),
          ...invalidField(
            "video_mode",
            "is not supported by this model; one of t2v, i2v_first, i2v_last, multimodal_ref",
          ),
        },
        {
          name: "video: unsupported duration",
          body: videoBody({ duration: 7 }),
          ...invalidField("duration", "is not a duration of this model; one of 5, 10"),
        },
        {
          name: "video: duration as string",
          body: videoBody({ duration: "5" }),
          ...invalidField("duration", "must be a number of seconds"),
        },
        {
          name: "video: resolution the model lacks",
          body: videoBody({ resolution: "1080p" }),
          ...invalidField("resolution", "is not a resolution of this model; one of 480p, 720p"),
        },
        {
          name: "video: image model",
          body: videoBody({ model: "p-image" }),
          ...invalidField("model", "is not a video model of the catalog"),
        },
        {
          name: "video: i2v_first without images",
          body: videoBody({ video_mode: "i2v_first" }),
          ...invalidField("image_urls", "is required when video_mode is i2v_first (at least one URL)"),
        },
        {
          name: "video: v2v_edit without source",
          body: videoBody({ model: "v-video-pro", video_mode: "v2v_edit" }),
          ...invalidField("source_video_url", "is required when video_mode is v2v_edit"),
        },
        {
          name: "video: ftp source video",
          body: videoBody({ model: "v-video-pro", video_mode: "v2v_edit", source_video_url: "ftp://x.test/v.mp4" }),
          ...notPublicHttps("source_video_url"),
        },
        {
          name: "video: http first frame",
          body: videoBody({ video_mode: "i2v_first", image_urls: ["http://x.test/a.png"] }),
          ...notPublicHttps("image_urls[0]"),
        },
      ] satisfies Case[]
    ).map((c) => ({ ...c, path: VIDEO })),
  ];
  for (const c of cases) {
    it(`${c.name} → ${c.status} ${c.code}`, async () => {
      const { post, state } = setup();
      const res = await post(c.path ?? IMAGE, c.body ?? imageBody(), {
        ...(c.idem !== undefined ? { idem: c.idem } : {}),
        ...(c.headers ? { headers: c.headers } : {}),
      });
      await expectError(res, c.status, c.code, c.details);
      expect(state.stats().tasks_created).toBe(0);
    });
  }

  it("accepts unknown fields and valid optional ones", async () => {
    const { post } = setup();
    expect(
      (
        await post(
          IMAGE,
          imageBody({
            future_field: { a: 1 },
            size: "4K",
            aspect_ratio: "16:9",
            mode: "edit",
            image_urls: ["https://x.test/a.png"],
          }),
        )
      ).status,
    ).toBe(201);
    expect(
      (
        await post(
          VIDEO,
          videoBody({
            model: "v-video-pro",
            video_mode: "v2v_edit",
            source_video_url: "https://x.test/v.mp4",
            resolution: "1080p",
            duration: 5,
            extra: true,
          }),
        )
      ).status,
    ).toBe(201);
  });

  it("answers an unknown route with 404 not_found and X-Request-Id", async () => {
    const { get, app } = setup();
    await expectError(await get("/openapi/v1/nope"), 404, "not_found");
    await expectError(await app.request("/"), 404, "not_found");
    await expectError(
      await app.request("/openapi/v1/models", { method: "DELETE", headers: { authorization: "Bearer sandbox" } }),
      404,
      "not_found",
    );
  });

  it("never answers arbitrary JSON bodies with a 5xx", async () => {
    const { post } = setup();
    await fc.assert(
      fc.asyncProperty(fc.boolean(), fc.jsonValue(), async (video, body) => {
        const res = await post(video ? VIDEO : IMAGE, body);
        expect(res.status).toBeLessThan(500);
        expect(res.headers.get("x-request-id")).toMatch(/^req_/);
      }),
      { numRuns: 150 },
    );
  });
});

describe("idempotency", () => {
  it("creates with 201, replays the same body with 200 and does not charge twice", async () => {
    const { post, state, balance } = setup();
    const idem = "replay-key-1";
    const first = await post(IMAGE, imageBody(), { idem });
    expect(first.status).toBe(201);
    const created = (await first.json()) as { data: { id: string; status: string } };
    expect(created.data.id).toMatch(/^up_[0-9a-z]{20,}$/);
    expect(created.data.status).toBe("queued");
    expect(first.headers.get("location")).toBe(`${BASE}/openapi/v1/tasks/${created.data.id}`);
    expect(first.headers.get("idempotent-replayed")).toBe("false");
    expect(balance()).toBe(1_000_000 - 40);

    // Same request with keys in another order is the same request.
    const reordered = Object.fromEntries(Object.entries(imageBody()).reverse());
    const again = await post(IMAGE, reordered, { idem });
    expect(again.status).toBe(200);
    expect(again.headers.get("location")).toBe(`${BASE}/openapi/v1/tasks/${created.data.id}`);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toEqual(created);

    expect(balance()).toBe(1_000_000 - 40);
    const stats = state.stats();
    expect(stats).toMatchObject({ tasks_created: 1, create_requests: 2, replays: 1 });
    expect(state.creationsByIdempotencyKey("sandbox")).toEqual(new Map([[idem, 1]]));
  });

  it("replays the task as it is now, not as it was created", async () => {
    const { post, clock } = setup();
    expect((await post(IMAGE, imageBody(), { idem: "later-key-1" })).status).toBe(201);
    clock.advance(10_000);
    const again = (await (await post(IMAGE, imageBody(), { idem: "later-key-1" })).json()) as {
      data: { status: string };
    };
    expect(again.data.status).toBe("succeeded");
  });

  it("rejects the same key with a different body or endpoint: 409 idempotency_key_reused", async () => {
    const { post, state } = setup();
    await post(IMAGE, imageBody(), { idem: "reused-key-1" });
    await expectError(
      await post(IMAGE, imageBody({ prompt: "another prompt" }), { idem: "reused-key-1" }),
      409,
      "idempotency_key_reused",
    );
    await expectError(await post(VIDEO, imageBody(), { idem: "reused-key-1" }), 409, "idempotency_key_reused");
    expect(state.stats().tasks_created).toBe(1);
  });

  it("keys are per account", async () => {
    const { post, state } = setup({ accounts: [{ apiKey: "sandbox" }, { apiKey: "other" }] });
    expect((await post(IMAGE, imageBody(), { idem: "shared-key-1" })).status).toBe(201);
    expect((await post(IMAGE, imageBody({ prompt: "different" }), { idem: "shared-key-1", key: "other" })).status).toBe(
      201,
    );
    expect(state.stats().tasks_created).toBe(2);
  });

  it("a rejected request does not use up its key", async () => {
    const { post, state } = setup();
    expect((await post(IMAGE, imageBody({ count: 2 }), { idem: "retry-key-1" })).status).toBe(422);
    expect((await post(IMAGE, imageBody(), { idem: "retry-key-1" })).status).toBe(201);
    state.setBalance("sandbox", 0);
    expect((await post(IMAGE, imageBody(), { idem: "retry-key-2" })).status).toBe(402);
    state.setBalance("sandbox", 100);
    expect((await post(IMAGE, imageBody(), { idem: "retry-key-2" })).status).toBe(201);
  });
});

describe("charging", () => {
  it("402 insufficient_points creates no task and charges nothing", async () => {
    const { post, get, state, balance } = setup({ accounts: [{ apiKey: "sandbox", balance: 39 }] });
    await expectError(await post(IMAGE, imageBody()), 402, "insufficient_points");
    expect(balance()).toBe(39);
    expect(state.stats().tasks_created).toBe(0);
    expect(((await (await get("/openapi/v1/tasks")).json()) as { data: unknown[] }).data).toEqual([]);
    // A cheaper model fits the same balance.
    expect((await post(IMAGE, imageBody({ model: "flux-lite" }))).status).toBe(201);
    expect(balance()).toBe(19);
  });

  const prices: Record<"image" | "video", [Record<string, unknown>, number][]> = {
    image: [
      [{}, 40],
      [{ quality: "low" }, 20],
      [{ quality: "low", size: "4K" }, 50],
      [{ quality: "medium", size: "2K" }, 70],
      [{ quality: "high", size: "4K" }, 450],
      [{ quality: "xhigh", size: "2K" }, 480],
      [{ quality: "max", size: "4K" }, 1780],
      [{ quality: "auto", size: "1K" }, 530],
      [{ model: "flux-lite" }, 20],
      [{ model: "flux-lite", size: "2K", quality: "ignored-here" }, 20],
    ],
    video: [
      [{}, 500],
      [{ resolution: "720p" }, 750],
      [{ resolution: "720p", duration: 10 }, 1500],
      [{ resolution: "480p", duration: 10 }, 1000],
      [{ model: "v-video-pro" }, 750],
      [{ model: "v-video-pro", resolution: "1080p", duration: 5 }, 1000],
    ],
  };
  for (const kind of ["image", "video"] as const) {
    for (const [extra, price] of prices[kind]) {
      it(`${kind} ${JSON.stringify(extra)} costs ${price}`, async () => {
        const { post, balance } = setup();
        const res = await post(
          kind === "image" ? IMAGE : VIDEO,
          kind === "image" ? imageBody(extra) : videoBody(extra),
        );
        expect(res.status).toBe(201);
        expect(((await res.json()) as { usage: unknown }).usage).toEqual({ points_charged: price, points_refunded: 0 });
        expect(balance()).toBe(1_000_000 - price);
      });
    }
  }
});

describe("limits", () => {
  it("429 concurrent_limit beyond maxConcurrent, with Retry-After until a slot frees", async () => {
    const { post, clock, state, createImage } = setup({ accounts: [{ apiKey: "sandbox", maxConcurrent: 2 }] });
    await createImage();
    clock.advance(500);
    await createImage();
    const res = await post(IMAGE, imageBody());
    expect(res.headers.get("retry-after")).toBe("4"); // the first task ends at +4000 ms, now is +500
    await expectError(res, 429, "concurrent_limit");
    clock.advance(3_499);
    expect((await post(IMAGE, imageBody())).status).toBe(429);
    clock.advance(1); // first task succeeded: one slot free
    await createImage();
    expect(state.stats()).toMatchObject({ tasks_created: 3, concurrent_limited: 2 });
    expect(state.stats().per_account.sandbox!.running).toBe(2);
  });

  it("429 rate_limit on the 121st read within 60 s; Retry-After follows the window; rejected reads do not count", async () => {
    const { get, clock, state, createImage } = setup();
    const id = await createImage();
    for (let i = 0; i < 60; i++) expect((await get(`/openapi/v1/tasks/${id}`)).status).toBe(200);
    clock.advance(30_000);
    for (let i = 0; i < 59; i++) expect((await get(`/openapi/v1/tasks/${id}`)).status).toBe(200);
    expect((await get("/openapi/v1/tasks")).status).toBe(200); // the list shares the budget: 120th read

    const limited = await get(`/openapi/v1/tasks/${id}`);
    expect(limited.headers.get("retry-after")).toBe("30");
    await expectError(limited, 429, "rate_limit");
    clock.advance(29_500);
    const stillLimited = await get("/openapi/v1/tasks");
    expect(stillLimited.status).toBe(429);
    expect(stillLimited.headers.get("retry-after")).toBe("1");

    // Creation and the catalog are not read-limited.
    expect((await get("/openapi/v1/models")).status).toBe(200);
    await createImage();

    clock.advance(500); // T0+60 s: the first 60 reads leave the window, 60 slots free
    for (let i = 0; i < 60; i++) expect((await get(`/openapi/v1/tasks/${id}`)).status).toBe(200);
    const again = await get(`/openapi/v1/tasks/${id}`);
    expect(again.status).toBe(429);
    expect(again.headers.get("retry-after")).toBe("30");
    expect(state.stats()).toMatchObject({ task_reads: 180, rate_limited: 3 });
  });

  it("readsPerMinute 0 means unlimited", async () => {
    const { get } = setup({ accounts: [{ apiKey: "sandbox", readsPerMinute: 0 }] });
    for (let i = 0; i < 300; i++) expect((await get("/openapi/v1/tasks")).status).toBe(200);
  });

  it("read windows are per account", async () => {
    const { get } = setup({
      accounts: [
        { apiKey: "sandbox", readsPerMinute: 2 },
        { apiKey: "other", readsPerMinute: 2 },
      ],
    });
    expect((await get("/openapi/v1/tasks")).status).toBe(200);
    expect((await get("/openapi/v1/tasks")).status).toBe(200);
    expect((await get("/openapi/v1/tasks")).status).toBe(429);
    expect((await get("/openapi/v1/tasks", "other")).status).toBe(200);
  });
});

describe("task progression", () => {
  it("image: queued → processing → succeeded, then fixed", async () => {
    const { get, clock, createImage } = setup();
    const id = await createImage({ size: "2K", aspect_ratio: "9:16" });
    const read = async () => (await get(`/openapi/v1/tasks/${id}`)).json();
    const data = (status: string, updated: number, completed: number | null) =>
      taskData({ id, status, type: "image", model: "p-image" }, updated, completed);
    const usage = { points_charged: 70, points_refunded: 0 };
    expect(await read()).toEqual({ data: data("queued", T0, null), usage });
    clock.advance(999);
    expect(await read()).toEqual({ data: data("queued", T0, null), usage });
    clock.advance(1);
    expect(await read()).toEqual({ data: data("processing", T0 + 1000, null), usage });
    clock.advance(2_999);
    expect(((await read()) as { data: { status: string } }).data.status).toBe("processing");
    clock.advance(1);
    const done = {
      data: data("succeeded", T0 + 4000, T0 + 4000),
      output: { images: [{ url: `${BASE}/files/${id}-0.png`, width: 1152, height: 2048 }] },
      usage,
    };
    expect(await read()).toEqual(done);
    clock.advance(3_600_000);
    expect(await read()).toEqual(done);
  });

  it("video follows its own timings and reports its duration", async () => {
    const { get, clock, createVideo } = setup();
    const id = await createVideo({ duration: 10, resolution: "720p" });
    const status = async () =>
      ((await (await get(`/openapi/v1/tasks/${id}`)).json()) as { data: { status: string } }).data.status;
    clock.advance(1_999);
    expect(await status()).toBe("queued");
    clock.advance(1);
    expect(await status()).toBe("processing");
    clock.advance(10_000);
    expect(await (await get(`/openapi/v1/tasks/${id}`)).json()).toMatchObject({
      data: { status: "succeeded", type: "video", model: "v-video", completed_at: iso(T0 + 12_000) },
      output: { video: { url: `${BASE}/files/${id}.mp4`, duration: 10 } },
      usage: { points_charged: 1500, points_refunded: 0 },
    });
  });

  it("a prompt with sim:fail ends failed with generation_failed and a full refund", async () => {
    const { get, clock, balance, createVideo, state } = setup();
    const id = await createVideo({ prompt: "please sim:fail this", resolution: "720p" });
    expect(balance()).toBe(1_000_000 - 750);
    clock.advance(11_999);
    expect(((await (await get(`/openapi/v1/tasks/${id}`)).json()) as { usage: unknown }).usage).toEqual({
      points_charged: 750,
      points_refunded: 0,
    });
    clock.advance(1);
    const failed = {
      data: {
        ...taskData({ id, status: "failed", type: "video", model: "v-video" }, T0 + 12_000, T0 + 12_000),
        error: { code: "generation_failed", message: expect.any(String) },
      },
      usage: { points_charged: 750, points_refunded: 750 },
    };
    expect(await (await get(`/openapi/v1/tasks/${id}`)).json()).toEqual(failed);
    expect(balance()).toBe(1_000_000);
    clock.advance(60_000);
    expect(await (await get(`/openapi/v1/tasks/${id}`)).json()).toEqual(failed);
    expect(balance()).toBe(1_000_000); // refunded once only
    expect(state.stats().per_account.sandbox!.running).toBe(0);
  });

  it("zero timings still answer the creation with queued", async () => {
    const { post, get, clock } = setup({ timings: { imageQueuedMs: 0, imageProcessingMs: 0 } });
    const res = await post(IMAGE, imageBody());
    const body = (await res.json()) as { data: { id: string; status: string } };
    expect(body.data.status).toBe("queued");
    clock.advance(1);
    expect(
      ((await (await get(`/openapi/v1/tasks/${body.data.id}`)).json()) as { data: { status: string } }).data.status,
    ).toBe("succeeded");
  });

  it("setTimings applies to tasks created afterwards", async () => {
    const { get, clock, state, createImage } = setup();
    const before = await createImage();
    state.setTimings({ imageQueuedMs: 10, imageProcessingMs: 10 });
    const after = await createImage();
    clock.advance(20);
    const status = async (id: string) =>
      ((await (await get(`/openapi/v1/tasks/${id}`)).json()) as { data: { status: string } }).data.status;
    expect(await status(before)).toBe("queued");
    expect(await status(after)).toBe("succeeded");
  });
});

describe("task list", () => {
  type Page = { data: { id: string; type: string; status: string }[]; next_cursor: string | null };
  const page = async (get: (p: string) => Response | Promise<Response>, query: string) => {
    const res = await get(`/openapi/v1/tasks${query}`);
    expect(res.status).toBe(200);
    return (await res.json()) as Page;
  };

  it("lists newest first with a cursor, flattened items and filters", async () => {
    const { get, clock, createImage, createVideo } = setup();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      // Several tasks in the same millisecond must still keep creation order.
      ids.push(i % 2 === 0 ? await createImage() : await createVideo());
      if (i === 2) clock.advance(1_000);
    }
    const newestFirst = [...ids].reverse();

    const p1 = await page(get, "?limit=2");
    expect(p1.data.map((t) => t.id)).toEqual(newestFirst.slice(0, 2));
    expect(p1.next_cursor).toEqual(expect.any(String));
    const p2 = await page(get, `?limit=2&cursor=${p1.next_cursor}`);
    expect(p2.data.map((t) => t.id)).toEqual(newestFirst.slice(2, 4));
    const p3 = await page(get, `?limit=2&cursor=${p2.next_cursor}`);
    expect(p3.data.map((t) => t.id)).toEqual(newestFirst.slice(4));
    expect(p3.next_cursor).toBeNull();
    expect((await page(get, "")).data).toHaveLength(5);
    expect((await page(get, "?limit=5")).next_cursor).toBeNull();

    const videos = await page(get, "?type=video");
    expect(videos.data.map((t) => t.id)).toEqual([ids[3], ids[1]]);

    clock.advance(3_000); // images (4 s) of the first batch are done at T0+4 s; videos (12 s) are not
    const succeeded = await page(get, "?status=succeeded");
    expect(succeeded.data.map((t) => t.id)).toEqual([ids[2], ids[0]]);
    const first = succeeded.data[1]!;
    expect(first).toEqual({
      ...taskData({ id: ids[0]!, status: "succeeded", type: "image", model: "p-image" }, T0 + 4000, T0 + 4000),
      output: { images: [{ url: `${BASE}/files/${ids[0]}-0.png`, width: 1024, height: 1024 }] },
      usage: { points_charged: 40, points_refunded: 0 },
    });
    const processingVideos = await page(get, "?type=video&status=processing&limit=1");
    expect(processingVideos.data.map((t) => t.id)).toEqual([ids[3]]);
    const rest = await page(get, `?type=video&status=processing&limit=1&cursor=${processingVideos.next_cursor}`);
    expect(rest).toEqual({ data: [expect.objectContaining({ id: ids[1] })], next_cursor: null });
  });

  it("shows failures flattened with their error", async () => {
    const { get, clock, createImage } = setup();
    await createImage({ prompt: "x sim:fail" });
    clock.advance(4_000);
    const { data } = await page(get, "?status=failed");
    expect(data[0]).toMatchObject({
      status: "failed",
      error: { code: "generation_failed" },
      usage: { points_charged: 40, points_refunded: 40 },
    });
    expect(data[0]).not.toHaveProperty("output");
  });

  const bad = [
    "?limit=0",
    "?limit=101",
    "?limit=abc",
    "?limit=1.5",
    "?limit=",
    "?type=audio",
    "?status=done",
    "?cursor=bm9wZQ",
  ];
  for (const query of bad) {
    it(`${query} → 400 invalid_request`, async () => {
      const { get } = setup();
      const res = await get(`/openapi/v1/tasks${query}`);
      const body = (await res.json()) as { error: { code: string } };
      expect(res.status).toBe(400);
      expect(body.error.code).toBe("invalid_request");
    });
  }

  it("rejects another account's cursor", async () => {
    const { get, createImage } = setup({ accounts: [{ apiKey: "sandbox" }, { apiKey: "other" }] });
    await createImage();
    await createImage();
    const { next_cursor } = await page(get, "?limit=1");
    await expectError(await get(`/openapi/v1/tasks?cursor=${next_cursor}`, "other"), 400, "invalid_request");
  });
});

describe("catalog", () => {
  it("lists image and video models with their capabilities", async () => {
    const { get } = setup();
    const res = await get("/openapi/v1/models");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { image_models: { id: string }[]; video_models: { id: string }[] } };
    expect(body.data.image_models.map((m) => m.id)).toEqual(expect.arrayContaining(["p-image", "flux-lite"]));
    expect(body.data.image_models.find((m) => m.id === "p-image")).toMatchObject({
      name: expect.any(String),
      modes: ["generate", "edit"],
      sizes: ["1K", "2K", "4K"],
      aspect_ratios: expect.arrayContaining(["1:1"]),
    });
    expect(body.data.video_models.find((m) => m.id === "v-video")).toMatchObject({
      video_modes: ["t2v", "i2v_first", "i2v_last", "multimodal_ref"],
      durations: [5, 10],
      resolutions: ["480p", "720p"],
    });
    expect(body.data.video_models.find((m) => m.id === "v-video-pro")).toMatchObject({
      video_modes: ["t2v", "i2v_first", "v2v_edit"],
      durations: [5],
      resolutions: ["720p", "1080p"],
    });
  });
});

describe("admin endpoints", () => {
  it("stats, balance and timings over the app", async () => {
    const { app, post, createImage } = setup();
    const id = await createImage();
    await post(IMAGE, imageBody(), { idem: "admin-key-1" });
    await post(IMAGE, imageBody(), { idem: "admin-key-1" });
    const stats = await (await app.request("/_sim/stats")).json();
    // One account: the totals are its counts.
    const counts = {
      tasks_created: 2,
      create_requests: 3,
      replays: 1,
      task_reads: 0,
      rate_limited: 0,
      concurrent_limited: 0,
    };
    expect(stats).toEqual({
      ...counts,
      per_account: {
        sandbox: {
          ...counts,
          running: 2,
          balance: 1_000_000 - 80,
        },
      },
      creations_per_key_max: 1,
    });
    const admin = (path: string, body: unknown) =>
      app.request(path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const setBal = await admin("/_sim/balance", { api_key: "sandbox", balance: 5 });
    expect(await setBal.json()).toEqual({ data: { balance: 5 } });
    expect((await post(IMAGE, imageBody())).status).toBe(402);
    await expectError(await admin("/_sim/balance", { api_key: "nobody", balance: 5 }), 404, "not_found");
    await expectError(await admin("/_sim/balance", { api_key: "sandbox", balance: -1 }), 400, "invalid_request", [
      { field: "balance", message: expect.any(String) },
    ]);
    const timings = await admin("/_sim/timings", { imageQueuedMs: 5 });
    expect(await timings.json()).toEqual({
      data: { imageQueuedMs: 5, imageProcessingMs: 3000, videoQueuedMs: 2000, videoProcessingMs: 10000 },
    });
    expect((await admin("/_sim/timings", { imageQueuedMS: 5 })).status).toBe(400);
    const added = await admin("/_sim/accounts", { api_key: "new-one", balance: 7 });
    expect(added.status).toBe(201);
    expect((await app.request("/openapi/v1/models", { headers: { authorization: "Bearer new-one" } })).status).toBe(
      200,
    );
    expect((await app.request(`/files/${id}-0.png`)).status).toBe(404); // not succeeded yet
  });
});

describe("startSimulator", () => {
  it("answers over real HTTP on an ephemeral port", async () => {
    const sim = await startSimulator({ timings: { imageQueuedMs: 0, imageProcessingMs: 50 } });
    try {
      expect(sim.url).toBe(`http://127.0.0.1:${sim.port}`);
      expect(sim.port).toBeGreaterThan(0);
      const auth = { authorization: "Bearer sandbox" };
      const models = await fetch(`${sim.url}/openapi/v1/models`, { headers: auth });
      expect(models.status).toBe(200);
      expect(models.headers.get("x-request-id")).toMatch(/^req_/);

      const created = await fetch(`${sim.url}${IMAGE}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json", "idempotency-key": "http-key-1" },
        body: JSON.stringify(imageBody()),
      });
      expect(created.status).toBe(201);
      const location = created.headers.get("location")!;
      expect(location.startsWith(`${sim.url}/openapi/v1/tasks/up_`)).toBe(true);

      let task: { data: { status: string }; output?: { images: { url: string }[] } } | undefined;
      for (let i = 0; i < 100 && task?.data.status !== "succeeded"; i++) {
        await new Promise((r) => setTimeout(r, 20));
        task = (await (await fetch(location, { headers: auth })).json()) as typeof task;
      }
      expect(task?.data.status).toBe("succeeded");
      const file = await fetch(task!.output!.images[0]!.url);
      expect(file.status).toBe(200);
      expect(file.headers.get("content-type")).toBe("image/png");
      await file.arrayBuffer();

      const stats = (await (await fetch(`${sim.url}/_sim/stats`)).json()) as Record<string, unknown>;
      expect(stats).toMatchObject({ tasks_created: 1, create_requests: 1, creations_per_key_max: 1 });
      expect(sim.state.creationsByIdempotencyKey("sandbox")).toEqual(new Map([["http-key-1", 1]]));
    } finally {
      await sim.close();
    }
    await expect(fetch(`${sim.url}/_sim/stats`)).rejects.toThrow();
  });
});

import { http, HttpResponse } from "msw";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createSimulator } from "../../src/simulator/app.js";
import { catalogBody } from "../../src/simulator/catalog.js";
import { IMAGE_BODY_FIELDS, VIDEO_BODY_FIELDS } from "../../src/services/intake-fields.js";
import { createTask, readTask, taskRow } from "../helpers/flow.js";
import { imageBody, UPSTREAM_KEY, UPSTREAM_URL, videoBody, type TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/** docs/contract.md, "Intake": a mistake in a creation body is refused before anything is stored or charged. */
const suite = upstreamSuite();

/** The simulator behind msw; `catalog` replaces its model catalog (what the upstream says a model takes). */
function withSimulator(env: Record<string, string> = {}, catalog?: unknown) {
  const { t, up } = suite.setup(env);
  const { app } = createSimulator({
    clock: t.clock,
    accounts: [{ apiKey: UPSTREAM_KEY, maxConcurrent: 100, readsPerMinute: 0, balance: 1_000_000 }],
  });
  const sent: Record<string, unknown>[] = [];
  suite.server.use(
    http.get(`${UPSTREAM_URL}/openapi/v1/models`, () => HttpResponse.json((catalog ?? catalogBody()) as object)),
    http.post(`${UPSTREAM_URL}/openapi/v1/images/generations`, async ({ request }) => {
      sent.push((await request.clone().json()) as Record<string, unknown>);
      return app.fetch(request);
    }),
    http.all(`${UPSTREAM_URL}/*`, ({ request }) => app.fetch(request)),
  );
  return { t, up, sent };
}

const post = (
  t: TestRelay,
  apiKey: string,
  kind: "image" | "video",
  body: unknown,
  key = `k-${randomBytes(6).toString("hex")}`,
) => t.request(apiKey, `/openapi/v1/${kind}s/generations`, { method: "POST", json: body, idempotencyKey: key });

async function warm(t: TestRelay, apiKey: string) {
  expect((await t.request(apiKey, "/openapi/v1/models")).status).toBe(200);
}

describe("near-miss fields are refused with the field meant", () => {
  it.each([
    ["image", "callbak_url", "callback_url", "https://example.com/hook"],
    ["image", "metdata", "metadata", { a: "b" }],
    ["image", "callback_event", "callback_events", ["task.succeeded"]],
    ["video", "callbackUrl", "callback_url", "https://example.com/hook"],
    ["video", "image_url", "image_urls", ["https://cdn.example.com/a.png"]],
    // Other APIs' names for the callback (issue #39): no edit distance finds them, an alias does.
    ["image", "webhook_url", "callback_url", "https://example.com/hook"],
    ["video", "notify_url", "callback_url", "https://example.com/hook"],
    ["image", "webhookUrl", "callback_url", "https://example.com/hook"],
  ] as const)("%s %s → did you mean %s", async (kind, field, meant, value) => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    const base = kind === "image" ? imageBody() : videoBody();
    const res = await post(t, apiKey, kind, { ...base, [field]: value });
    const body = (await res.json()) as { error: { code: string; details: unknown[] } };
    expect(res.status).toBe(422);
    expect(body.error.code).toBe("validation_error");
    expect(body.error.details).toEqual([
      { field, message: `is not a field of this request; did you mean "${meant}"?`, did_you_mean: meant },
    ]);
    expect(((await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] }).data).toEqual([]);
  });

  it("a misspelled required field names both the missing field and the near miss", async () => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    const { prompt, ...rest } = imageBody();
    const res = await post(t, apiKey, "image", { ...rest, promt: prompt });
    expect(res.status).toBe(422);
    const details = ((await res.json()) as { error: { details: Array<{ field: string; did_you_mean?: string }> } })
      .error.details;
    expect(details.map((d) => [d.field, d.did_you_mean])).toEqual([
      ["prompt", undefined],
      ["promt", "prompt"],
    ]);
  });

  it("quality is a field of image requests (accepted, sent upstream, and in the OpenAPI request schema)", async () => {
    const { t, sent } = withSimulator();
    const { apiKey } = t.client();
    await warm(t, apiKey);
    await createTask(t, apiKey, { quality: "low" });
    await t.relay.submitter.runOnce();
    expect(sent[0]).toMatchObject({ quality: "low" });
    const doc = (await (await t.request(null, "/openapi.json")).json()) as {
      components: { schemas: Record<string, { properties: Record<string, unknown> }> };
    };
    // The request schemas list every field intake accepts, no more.
    expect(Object.keys(doc.components.schemas.ImageGenerationRequest!.properties).sort()).toEqual(
      [...IMAGE_BODY_FIELDS].sort(),
    );
    expect(Object.keys(doc.components.schemas.VideoGenerationRequest!.properties).sort()).toEqual(
      [...VIDEO_BODY_FIELDS].sort(),
    );
  });
});

describe("unknown fields pass only where the model's catalog entry names them", () => {
  const namingSeed = () => {
    const body = catalogBody() as { data: { image_models: Array<Record<string, unknown>> } };
    body.data.image_models[0] = { ...body.data.image_models[0], parameters: [{ name: "seed", type: "integer" }] };
    return body;
  };

  it("with a catalog that does not name it: 422 naming the field and the model; nothing stored", async () => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    await warm(t, apiKey);
    const res = await post(t, apiKey, "image", imageBody({ seed: 7 }));
    expect(res.status).toBe(422);
    expect(((await res.json()) as { error: { details: unknown } }).error.details).toEqual([
      { field: "seed", message: "is not a field of this request, and p-image's catalog entry does not name it" },
    ]);
  });

  it("with a catalog entry that names it: passed through to the upstream", async () => {
    const { t, sent } = withSimulator({}, namingSeed());
    const { apiKey } = t.client();
    await warm(t, apiKey);
    await createTask(t, apiKey, { seed: 7 });
    await t.relay.submitter.runOnce();
    expect(sent[0]).toMatchObject({ seed: 7 });
    expect(sent[0]).not.toHaveProperty("callback_headers");
  });

  it("with no catalog cached: passed through (the upstream decides)", async () => {
    const { t, sent } = withSimulator();
    const { apiKey } = t.client();
    await createTask(t, apiKey, { seed: 7 });
    await t.relay.submitter.runOnce();
    expect(sent[0]).toMatchObject({ seed: 7 });
  });

  it("what the catalog decides is decided at intake: a video_mode that needs image_urls or a source video", async () => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    await warm(t, apiKey);
    const i2v = await post(t, apiKey, "video", videoBody({ video_mode: "i2v_first" }));
    expect(i2v.status).toBe(422);
    expect(((await i2v.json()) as { error: { details: unknown } }).error.details).toEqual([
      { field: "image_urls", message: "is required when video_mode is i2v_first (at least one URL)" },
    ]);
    const v2v = await post(t, apiKey, "video", videoBody({ model: "v-video-pro", video_mode: "v2v_edit" }));
    expect(v2v.status).toBe(422);
    expect(((await v2v.json()) as { error: { details: unknown } }).error.details).toEqual([
      { field: "source_video_url", message: "is required when video_mode is v2v_edit" },
    ]);
  });
});

describe("callback_headers on a creation", () => {
  const KEY = randomBytes(32).toString("base64");

  it.each([
    [{ Host: "x" }, "callback_headers.Host"],
    [{ "Content-Type": "text/plain" }, "callback_headers.Content-Type"],
    [{ "webhook-id": "x" }, "callback_headers.webhook-id"],
    [{ "User-Agent": "x" }, "callback_headers.User-Agent"],
    [{ "bad name": "x" }, "callback_headers.bad name"],
    [{ "X-Token": "line\nbreak" }, "callback_headers.X-Token"],
    [{ "X-Token": "x".repeat(1025) }, "callback_headers.X-Token"],
    [Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`x-h${i}`, "v"])), "callback_headers"],
  ])("refuses %j (422 naming %s, never echoing the value)", async (headers, field) => {
    const { t } = withSimulator();
    const { apiKey } = t.client();
    const res = await post(t, apiKey, "image", imageBody({ callback_headers: headers }));
    expect(res.status).toBe(422);
    const text = await res.text();
    expect(
      (JSON.parse(text) as { error: { details: Array<{ field: string }> } }).error.details.map((d) => d.field),
    ).toEqual([field]);
    if (field !== "callback_headers") expect(text).not.toContain("line\nbreak");
  });

  it("without a callback_url and with no endpoint: 422 saying why, nothing stored; with an endpoint: accepted", async () => {
    const { t } = withSimulator({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
    const { id, apiKey } = t.client();
    const body = imageBody({ callback_headers: { "X-Zap-Token": "zap-token-1" } });
    const res = await post(t, apiKey, "image", body);
    const message =
      "callback_headers are sent only with this task's webhooks, and it has nowhere to send them: add a callback_url, or subscribe an endpoint first (POST /openapi/v1/webhooks/endpoints).";
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 422,
      body: {
        error: {
          code: "validation_error",
          message,
          request_id: res.headers.get("x-request-id"),
          details: [{ field: "callback_headers", message }],
        },
      },
    });
    expect(await t.store.tasks.list({ clientId: id, limit: 10 })).toEqual([]);
    const endpoint = await t.request(apiKey, "/openapi/v1/webhooks/endpoints", {
      method: "POST",
      json: { url: "http://127.0.0.1:9/hook" },
    });
    expect(endpoint.status).toBe(201);
    expect((await post(t, apiKey, "image", body)).status).toBe(201);
  });

  it("are stored sealed on the task and its events, and shown by no read", async () => {
    const { t, up } = withSimulator({ RELAY_ENCRYPTION_KEY: KEY });
    const { apiKey } = t.client();
    const token = "zap-secret-token-93c1";
    const id = await createTask(t, apiKey, {
      callback_url: "http://127.0.0.1:9/hook",
      callback_headers: { "X-Zap-Token": token, Authorization: `Bearer ${token}` },
    });
    void up;
    expect(taskRow(t, id).callbackHeaders).toMatch(/^enc:v1:/);
    expect(taskRow(t, id).callbackHeaders).not.toContain(token);
    for (let i = 0; i < 20 && taskRow(t, id).phase !== "done"; i++) {
      await t.relay.submitter.runOnce();
      t.clock.advance(5_000);
      await t.relay.poller.runOnce();
    }
    const events = t.database.sqlite.prepare("SELECT callback_headers FROM events WHERE task_id = ?").all(id) as Array<{
      callback_headers: string;
    }>;
    expect(events.length).toBeGreaterThan(0);
    for (const e of events) expect(e.callback_headers).toBe(taskRow(t, id).callbackHeaders);
    const reads = [
      JSON.stringify(await readTask(t, apiKey, id)),
      await (await t.request(apiKey, "/openapi/v1/tasks")).text(),
      await (await t.request(apiKey, "/openapi/v1/events")).text(),
      await (await t.request(apiKey, `/openapi/v1/tasks/${id}/deliveries`)).text(),
    ];
    for (const r of reads) expect(r).not.toContain(token);
  });
});

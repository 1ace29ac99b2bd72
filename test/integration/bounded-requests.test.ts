import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { WEBHOOK_BODY_MAX_BYTES } from "../../src/core/body-limit.js";
import { loadConfig } from "../../src/config.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { silentLogger } from "../../src/logger.js";
import { pgStore, sqliteStore } from "../../src/open-store.js";
import { Relay } from "../../src/relay.js";
import { newClient } from "../../src/services/clients.js";
import { REQUEST_BOUNDS } from "../../src/services/request-bounds.js";
import type { Store } from "../../src/store/store.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { FakeUpstream } from "../helpers/fake-upstream.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { startReceiver } from "../helpers/receiver.js";
import { UPSTREAM_KEY, UPSTREAM_URL, viaGlobalFetch } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Bounded requests and body sizes by the bytes sent (docs/contract.md, "Isolation"; issue #30 items 2, 5, 8, 12, 13),
 * through the API on both databases: a creation body of thousands of fields, callback headers the
 * sender cannot send, fields of any size, a client's stored bytes, list reads over large outputs,
 * and webhooks of tasks whose bodies would pass 256 KiB.
 */
const suite = upstreamSuite();

async function harness(dialect: "sqlite" | "postgres", env: Record<string, string> = {}) {
  const clock = new FakeClock();
  let store: Store;
  let location: Record<string, string>;
  if (dialect === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-bounded-"));
    store = sqliteStore(openDatabase(join(dir, "relay.db")));
    location = { DATABASE_PATH: join(dir, "relay.db") };
    suite.cleanup(async () => rmSync(dir, { recursive: true, force: true }));
  } else {
    const db = await freshPgDatabase();
    store = await pgStore(db.url, { migrate: false, max: 4 });
    location = { DATABASE_URL: db.url };
    suite.cleanup(() => db.drop());
  }
  const config = loadConfig({
    ...location,
    UPSTREAM_BASE_URL: UPSTREAM_URL,
    UPSTREAM_API_KEY: UPSTREAM_KEY,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    ...env,
  });
  const relay = new Relay({
    config,
    store,
    clock,
    logger: silentLogger,
    upstream: { baseUrl: UPSTREAM_URL, apiKey: UPSTREAM_KEY },
    fetch: viaGlobalFetch,
  });
  suite.cleanup(async () => {
    await relay.stop(1_000);
    await store.close();
  });
  const up = new FakeUpstream(clock);
  suite.server.use(...up.handlers());
  const request = (
    apiKey: string,
    path: string,
    init: { method?: string; json?: unknown; body?: string; key?: string } = {},
  ) => {
    const body = init.body ?? (init.json !== undefined ? JSON.stringify(init.json) : undefined);
    return Promise.resolve(
      relay.app.request(`http://relay.test${path}`, {
        method: init.method ?? "GET",
        headers: {
          Authorization: `Bearer ${apiKey}`,
          ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
          ...(init.key ? { "Idempotency-Key": init.key } : {}),
        },
        ...(body !== undefined ? { body } : {}),
      }),
    );
  };
  let keys = 0;
  return {
    relay,
    store,
    clock,
    up,
    request,
    async client(name = "c") {
      const { row, apiKey } = newClient(clock.now(), { name });
      const c = await store.clients.insert(row);
      return { id: c.id, apiKey };
    },
    create: (apiKey: string, body: Record<string, unknown>) =>
      request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        json: body,
        key: `bounded-key-${String(keys++).padStart(6, "0")}`,
      }),
    async run(rounds: number) {
      for (let i = 0; i < rounds; i++) {
        await relay.submitter.runOnce();
        clock.advance(3_000);
        await relay.poller.runOnce();
        clock.advance(3_000);
      }
    },
  };
}

const image = (extra: Record<string, unknown> = {}) => ({
  model: "p-image",
  mode: "generate",
  prompt: "a red fox in snow",
  count: 1,
  ...extra,
});
const errorOf = async (res: Response) =>
  (
    (await res.json()) as {
      error: { code: string; message: string; details?: Array<{ field: string; message: string }> };
    }
  ).error;

describe.each(["sqlite", "postgres"] as const)("bounded requests on %s (issue #30)", (dialect) => {
  it("repro 2: a 1 MiB creation of 12,000 unknown field names is refused for its field count; nothing is stored", async () => {
    const h = await harness(dialect);
    const { apiKey } = await h.client();
    const body: Record<string, unknown> = image();
    for (let i = 0; i < 12_000; i++) body[`callbak_url_${String(i).padStart(60, "0")}`] = 1;
    const res = await h.create(apiKey, body);
    expect(res.status).toBe(422);
    expect(await errorOf(res)).toMatchObject({
      code: "validation_error",
      details: [{ field: "(fields)", message: expect.stringContaining(`at most ${REQUEST_BOUNDS.maxFields}`) }],
    });
    expect(await h.store.tasks.list({ clientId: (await h.store.clients.list())[0]!.id, limit: 10 })).toEqual([]);
  });

  it.each([
    "Expect",
    "Connection",
    "Keep-Alive",
    "Proxy-Authorization",
    "Proxy-Connection",
    "TE",
    "Trailer",
    "Transfer-Encoding",
    "Upgrade",
    "Host",
    "Content-Length",
  ])("repro 12: callback header %s is refused at intake and in webhook settings, 422 naming it", async (name) => {
    const h = await harness(dialect);
    const { apiKey } = await h.client();
    const created = await h.create(
      apiKey,
      image({ callback_url: "https://hooks.example.com/x", callback_headers: { [name]: "100-continue" } }),
    );
    expect(created.status).toBe(422);
    const err = await errorOf(created);
    expect(err.code).toBe("validation_error");
    expect(err.details).toEqual([
      { field: `callback_headers.${name}`, message: expect.stringContaining("cannot be sent as a callback header") },
    ]);
    const settings = await h.request(apiKey, "/openapi/v1/webhooks/settings", {
      method: "PUT",
      json: { callback_headers: { [name]: "x" } },
    });
    expect(settings.status).toBe(422);
    expect((await errorOf(settings)).details).toEqual([
      { field: `callback_headers.${name}`, message: expect.stringContaining("cannot be sent as a callback header") },
    ]);
  });

  it("repro 13: image_urls of ~1 MiB, a resolution of 895 KiB, a nested parameter: each refused naming its field; nothing is stored", async () => {
    const h = await harness(dialect);
    const { id, apiKey } = await h.client();
    const cases: Array<[Record<string, unknown>, string]> = [
      [
        { mode: "edit", image_urls: Array.from({ length: 17 }, (_, i) => `https://cdn.example.com/${i}.png`) },
        "image_urls",
      ],
      [{ mode: "edit", image_urls: [`https://cdn.example.com/${"a".repeat(1000 * 1024)}.png`] }, "image_urls.0"],
      [{ resolution: "9".repeat(895 * 1024) }, "resolution"],
      [{ style: { layers: [{ name: "x".repeat(REQUEST_BOUNDS.maxStringBytes + 1) }] } }, "style.layers.0.name"],
    ];
    for (const [extra, field] of cases) {
      const res = await h.create(apiKey, image(extra));
      expect(res.status, field).toBe(422);
      const err = await errorOf(res);
      expect(err.code).toBe("validation_error");
      expect(err.details!.map((d) => d.field)).toEqual([field]);
    }
    expect(await h.store.tasks.storedBytesOfClient(id)).toBe(0);
    expect(await h.store.tasks.list({ clientId: id, limit: 10 })).toEqual([]);
  });

  it("a task storing more than 256 KiB in all (every field within its own bound) is 413 payload_too_large", async () => {
    const h = await harness(dialect);
    const { apiKey } = await h.client();
    const params = Object.fromEntries(
      Array.from({ length: 40 }, (_, i) => [`p${i}`, "x".repeat(REQUEST_BOUNDS.maxStringBytes)]),
    );
    const res = await h.create(apiKey, image(params));
    expect(res.status).toBe(413);
    expect(await errorOf(res)).toMatchObject({
      code: "payload_too_large",
      message: expect.stringContaining(`a task stores at most ${REQUEST_BOUNDS.maxStoredBytes}`),
    });
  });

  it("repro 13: each client's stored bytes are bounded (CLIENT_MAX_STORED_BYTES), exactly, under a burst; other clients unaffected", async () => {
    const h = await harness(dialect, { CLIENT_MAX_STORED_BYTES: "1MiB" });
    const big = image({ prompt: "漢".repeat(32_768) });
    const first = await h.client("first");
    expect((await h.create(first.apiKey, big)).status).toBe(201);
    const perTask = await h.store.tasks.storedBytesOfClient(first.id);
    expect(perTask).toBeGreaterThan(3 * 32_768);
    const fits = Math.floor((1024 * 1024) / perTask);

    // A burst of concurrent creations from another client stops exactly at the bound.
    const burst = await h.client("burst");
    const answers = await Promise.all(Array.from({ length: fits + 8 }, () => h.create(burst.apiKey, big)));
    expect(answers.filter((r) => r.status === 201)).toHaveLength(fits);
    const refused = answers.filter((r) => r.status !== 201);
    expect(refused.map((r) => r.status)).toEqual(Array(8).fill(429));
    expect(refused[0]!.headers.get("Retry-After")).toBe("3600");
    expect(await errorOf(refused[0]!)).toMatchObject({
      code: "storage_limit",
      message: expect.stringContaining("CLIENT_MAX_STORED_BYTES"),
    });
    expect(await h.store.tasks.storedBytesOfClient(burst.id)).toBe(fits * perTask);
    // The first client, with room of its own, is not affected by another client at its bound.
    expect((await h.create(first.apiKey, image())).status).toBe(201);
  });

  it("issue #38.3: outputs count toward the client's stored bytes; once they pass the bound, a creation is 429 storage_limit", async () => {
    const h = await harness(dialect, { CLIENT_MAX_STORED_BYTES: "1MiB" });
    const { id, apiKey } = await h.client();
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await h.create(apiKey, image());
      expect(res.status).toBe(201);
      ids.push(((await res.json()) as { data: { id: string } }).data.id);
    }
    const requests = await h.store.tasks.storedBytesOfClient(id);
    expect(requests).toBeLessThan(4_096);
    await h.run(1);
    const output = { text: "漢".repeat(200_000) }; // 600,000 bytes of UTF-8 each
    for (const taskId of ids) h.up.set(h.up.taskOf(taskId)!.id, { status: "succeeded", output });
    await h.run(2);
    const stored = await h.store.tasks.storedBytesOfClient(id);
    expect(stored).toBeGreaterThan(requests + 2 * 600_000);
    const res = await h.create(apiKey, image());
    expect(res.status).toBe(429);
    expect(res.headers.get("Retry-After")).toBe("3600");
    const perTask = requests / 2;
    expect(await errorOf(res)).toEqual({
      code: "storage_limit",
      message: `Your tasks store ${stored} bytes; this one (${perTask}) would pass your limit of ${1024 * 1024}. Finished tasks are removed after the retention period; retry then, or ask the operator for a higher CLIENT_MAX_STORED_BYTES.`,
      request_id: expect.stringMatching(/^req_/),
    });
  });

  it("repro 8: list reads never build large outputs: each item is held to 256 KiB, large outputs omitted with output_omitted", async () => {
    const h = await harness(dialect);
    const { apiKey } = await h.client();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++)
      ids.push(((await (await h.create(apiKey, image())).json()) as { data: { id: string } }).data.id);
    await h.run(1);
    const large = { text: "x".repeat(3 * 1024 * 1024) };
    const cjk = { text: "漢".repeat(90_000) }; // 270 KB of UTF-8 in 90,000 characters
    const small = { images: [{ url: "https://cdn.example.com/a.png" }] };
    for (const [i, output] of [large, large, cjk, small].entries())
      h.up.set(h.up.taskOf(ids[i]!)!.id, { status: "succeeded", output });
    await h.run(2);
    const res = await h.request(apiKey, "/openapi/v1/tasks?limit=100");
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(Buffer.byteLength(text)).toBeLessThan(4 * WEBHOOK_BODY_MAX_BYTES);
    const items = (
      JSON.parse(text) as { data: Array<{ id: string; status: string; output: unknown; output_omitted?: boolean }> }
    ).data;
    const byId = new Map(items.map((t) => [t.id, t]));
    for (const id of ids.slice(0, 3))
      expect(byId.get(id)).toMatchObject({ status: "succeeded", output: null, output_omitted: true });
    expect(byId.get(ids[3]!)).toMatchObject({ status: "succeeded", output: small });
    expect(byId.get(ids[3]!)).not.toHaveProperty("output_omitted");
    // The task itself still reads whole.
    expect(
      ((await (await h.request(apiKey, `/openapi/v1/tasks/${ids[2]}`)).json()) as { output: unknown }).output,
    ).toEqual(cjk);
  });

  it("repro 5: a task ending with a 300,000-character error, or 90,000 CJK characters of output, is still delivered, within 256 KiB", async () => {
    const h = await harness(dialect);
    const receiver = await startReceiver();
    suite.cleanup(() => receiver.close());
    const { apiKey } = await h.client();
    const ids: string[] = [];
    for (let i = 0; i < 2; i++)
      ids.push(
        (
          (await (await h.create(apiKey, image({ callback_url: receiver.url("/hook") }))).json()) as {
            data: { id: string };
          }
        ).data.id,
      );
    await h.run(1);
    h.up.set(h.up.taskOf(ids[0]!)!.id, {
      status: "failed",
      error: { code: "content_policy", message: "m".repeat(300_000), request_id: "req_up" },
    });
    h.up.set(h.up.taskOf(ids[1]!)!.id, { status: "succeeded", output: { text: "漢".repeat(90_000) } });
    await h.run(2);
    await h.relay.dispatcher.runOnce();
    expect(receiver.requests).toHaveLength(2);
    for (const r of receiver.requests) expect(Buffer.byteLength(r.body)).toBeLessThanOrEqual(WEBHOOK_BODY_MAX_BYTES);
    const byTask = new Map(receiver.requests.map((r) => [r.json.data.id as string, r.json]));
    expect(byTask.get(ids[0]!)).toMatchObject({
      type: "task.failed",
      data: { error: { code: "content_policy", request_id: "req_up", message_truncated: true } },
    });
    expect(byTask.get(ids[1]!)).toMatchObject({ type: "task.succeeded", data: { output: null, output_omitted: true } });
    expect(receiver.invalid).toEqual([]);
  });
});

import { http, HttpResponse } from "msw";
import { createPublicKey, randomBytes, verify } from "node:crypto";
import { describe, expect, it } from "vitest";
import { catalogBody } from "../../src/simulator/catalog.js";
import type { Received } from "../helpers/receiver.js";
import { UPSTREAM_URL, type TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";
import { runCliInProcess } from "../helpers/cli.js";

/** docs/contract.md, "Receivers": a client's webhook defaults, Ed25519 signing, and sample events. */
const suite = upstreamSuite();
const KEY = randomBytes(32).toString("base64");
const TOKEN = "n8n-header-token-5d1f0a";

const settings = (t: TestRelay, apiKey: string, body?: unknown) =>
  t.request(apiKey, "/openapi/v1/webhooks/settings", body === undefined ? {} : { method: "PUT", json: body });

async function ok(res: Response): Promise<any> {
  const body = await res.json();
  expect(res.status, JSON.stringify(body)).toBe(200);
  return (body as { data: unknown }).data;
}

/**
 * Verifies every v1a signature of a delivery with node:crypto and a `whpk_` public key alone (not
 * the relay's signer): returns how many of the header's signatures that key verifies.
 */
function verifiedBy(publicKey: string, req: Received): number {
  expect(publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);
  const raw = Buffer.from(publicKey.slice("whpk_".length), "base64");
  expect(raw).toHaveLength(32);
  const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
  const content = Buffer.from(`${req.headers["webhook-id"]}.${req.headers["webhook-timestamp"]}.${req.body}`);
  return req.headers["webhook-signature"]!.split(" ").filter((part) => {
    const [version, sig] = part.split(",");
    return version === "v1a" && verify(null, content, key, Buffer.from(sig!, "base64"));
  }).length;
}

async function testEvent(t: TestRelay, apiKey: string, body: Record<string, unknown>) {
  return ok(await t.request(apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: body }));
}

describe("GET/PUT /openapi/v1/webhooks/settings", () => {
  it("defaults, then notification_url and callback headers set: GET shows header names only, the row holds them sealed", async () => {
    const { t } = suite.setup({ RELAY_ENCRYPTION_KEY: KEY });
    const { apiKey, id } = t.client();
    expect(await ok(await settings(t, apiKey))).toEqual({
      notification_url: null,
      callback_headers: null,
      signature: "hmac",
    });
    const put = await ok(
      await settings(t, apiKey, {
        notification_url: "https://ops.example.com/genrelay",
        callback_headers: { "X-N8n-Token": TOKEN, Authorization: `Bearer ${TOKEN}` },
      }),
    );
    expect(put).toEqual({
      notification_url: "https://ops.example.com/genrelay",
      callback_headers: ["authorization", "x-n8n-token"],
      signature: "hmac",
    });
    const text = await (await settings(t, apiKey)).text();
    expect(text).not.toContain(TOKEN);
    const row = t.database.sqlite
      .prepare("SELECT notification_url, callback_headers FROM clients WHERE id = ?")
      .get(id) as { notification_url: string; callback_headers: string };
    expect(row.notification_url).toBe("https://ops.example.com/genrelay");
    expect(row.callback_headers).toMatch(/^enc:v1:/);
    expect(row.callback_headers).not.toContain(TOKEN);
    // Fields left out are unchanged; null clears.
    expect(await ok(await settings(t, apiKey, { callback_headers: null }))).toMatchObject({
      notification_url: "https://ops.example.com/genrelay",
      callback_headers: null,
    });
    expect(await ok(await settings(t, apiKey, { notification_url: null }))).toMatchObject({ notification_url: null });
  });

  it("refuses a bad notification_url like a bad callback_url, reserved header names, and near-miss keys", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const url = await settings(t, apiKey, { notification_url: "https://user:pw@ops.example.com/x" });
    expect(url.status).toBe(400);
    expect(((await url.json()) as { error: { code: string; details: Array<{ field: string }> } }).error).toMatchObject({
      code: "invalid_callback_url",
      details: [{ field: "notification_url" }],
    });
    const reserved = await settings(t, apiKey, { callback_headers: { "Webhook-Signature": "x" } });
    expect(reserved.status).toBe(422);
    expect(
      ((await reserved.json()) as { error: { details: Array<{ field: string }> } }).error.details.map((d) => d.field),
    ).toEqual(["callback_headers.Webhook-Signature"]);
    const typo = await settings(t, apiKey, { notification_ur: "https://ops.example.com/x" });
    expect(typo.status).toBe(422);
    expect(((await typo.json()) as { error: { details: unknown } }).error.details).toEqual([
      {
        field: "notification_ur",
        message: 'is not a setting; did you mean "notification_url"?',
        did_you_mean: "notification_url",
      },
    ]);
    const scheme = await settings(t, apiKey, { signature: "rsa" });
    expect(scheme.status).toBe(422);
  });
});

describe("ED25519 signing (v1a, whsk_/whpk_)", () => {
  it("signs every message with the key pair; the public key alone verifies it; rotation sends both signatures for 24 hours", async () => {
    const { t } = suite.setup({ RELAY_ENCRYPTION_KEY: KEY });
    const r = await suite.receiver();
    const { apiKey, id } = t.client();
    const s = await ok(await settings(t, apiKey, { signature: "ed25519", callback_headers: { "X-N8n-Token": TOKEN } }));
    expect(s.signature).toBe("ed25519");
    const first = s.public_key as string;
    // The signing key is sealed at rest, never shown.
    const row = t.database.sqlite.prepare("SELECT signing_key FROM clients WHERE id = ?").get(id) as {
      signing_key: string;
    };
    expect(row.signing_key).toMatch(/^enc:v1:/);
    // Past the switch's 24-hour overlap (the hmac v1 signature comes beside v1a until then).
    t.clock.advance(86_400_001);

    await testEvent(t, apiKey, { url: r.url("/hook") });
    const ping = r.requests[0]!;
    expect(ping.headers["webhook-signature"]).toMatch(/^v1a,[A-Za-z0-9+/]{86}==$/);
    expect(verifiedBy(first, ping)).toBe(1);
    expect(ping.headers["x-n8n-token"]).toBe(TOKEN);
    expect((JSON.parse(ping.body) as { id: string }).id).toBe(ping.headers["webhook-id"]);

    const rotated = await ok(await t.request(apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" }));
    expect(rotated).toEqual({
      signature: "ed25519",
      public_key: expect.stringMatching(/^whpk_/),
      previous_key_expires_at: new Date(t.clock.now() + 86_400_000).toISOString(),
    });
    expect(rotated.public_key).not.toBe(first);
    expect(await ok(await settings(t, apiKey))).toMatchObject({
      public_key: rotated.public_key,
      previous_public_key: first,
    });
    await testEvent(t, apiKey, { url: r.url("/hook") });
    const during = r.requests[1]!;
    expect(during.headers["webhook-signature"]!.split(" ")).toHaveLength(2);
    expect(verifiedBy(rotated.public_key, during)).toBe(1);
    expect(verifiedBy(first, during)).toBe(1);

    t.clock.advance(86_400_001);
    await testEvent(t, apiKey, { url: r.url("/hook") });
    const after = r.requests[2]!;
    expect(verifiedBy(rotated.public_key, after)).toBe(1);
    expect(verifiedBy(first, after)).toBe(0);

    // Back to hmac: v1 again; ed25519 once more keeps the same public key.
    await ok(await settings(t, apiKey, { signature: "hmac" }));
    await testEvent(t, apiKey, { url: r.url("/hook") });
    expect(r.requests[3]!.headers["webhook-signature"]).toMatch(/^v1,/);
    expect((await ok(await settings(t, apiKey, { signature: "ed25519" }))).public_key).toBe(rotated.public_key);
  });
});

describe("POST /openapi/v1/webhooks/test with a type: realistic samples", () => {
  it("a task type sends a sample shaped like a real task of the catalog's first model of that kind, signed, with the default headers", async () => {
    const { t } = suite.setup();
    const catalog = catalogBody() as {
      data: { image_models: Array<{ id: string }>; video_models: Array<{ id: string }> };
    };
    suite.server.use(http.get(`${UPSTREAM_URL}/openapi/v1/models`, () => HttpResponse.json(catalog)));
    const r = await suite.receiver();
    const { apiKey } = t.client();
    expect((await t.request(apiKey, "/openapi/v1/models")).status).toBe(200);
    await ok(await settings(t, apiKey, { callback_headers: { "X-Zapier-Token": TOKEN } }));

    const res = await testEvent(t, apiKey, { url: r.url("/zap"), type: "task.succeeded" });
    expect(res).toMatchObject({ type: "task.succeeded", succeeded: true, status_code: 200 });
    const got = r.requests[0]!;
    expect(got.headers["x-zapier-token"]).toBe(TOKEN);
    expect(got.headers["webhook-signature"]).toMatch(/^v1,/);
    const body = JSON.parse(got.body) as { id: string; type: string; data: Record<string, any> };
    expect(body.id).toBe(got.headers["webhook-id"]);
    expect(body.type).toBe("task.succeeded");
    expect(body.data).toMatchObject({
      sample: true,
      type: "image",
      status: "succeeded",
      model: catalog.data.image_models[0]!.id,
      usage: { points_charged: expect.any(Number) },
    });
    expect(body.data.output.images[0].url).toMatch(/^https:\/\//);

    await testEvent(t, apiKey, { url: r.url("/zap"), type: "task.failed", task_type: "video" });
    const failed = JSON.parse(r.requests[1]!.body) as { data: Record<string, any> };
    expect(failed.data).toMatchObject({
      sample: true,
      type: "video",
      status: "failed",
      model: catalog.data.video_models[0]!.id,
      error: { code: expect.any(String) },
      output: null,
    });

    const bad = await t.request(apiKey, "/openapi/v1/webhooks/test", {
      method: "POST",
      json: { url: r.url("/zap"), type: "task.done" },
    });
    expect(bad.status).toBe(422);
  });
});

describe("CLI clients update: the same settings", () => {
  it("sets notification URL, callback headers and the signature scheme; prints header names, never values", async () => {
    const { t } = suite.setup({ RELAY_ENCRYPTION_KEY: KEY });
    const { apiKey, id } = t.client();
    const env = { DATABASE_PATH: t.config.databasePath, RELAY_ENCRYPTION_KEY: KEY };
    const run = await runCliInProcess(
      [
        "clients",
        "update",
        id,
        "--notification-url",
        "https://ops.example.com/n",
        "--callback-header",
        `X-Make-Token=${TOKEN}`,
        "--signature",
        "ed25519",
        "--json",
      ],
      env,
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout + run.stderr).not.toContain(TOKEN);
    const printed = JSON.parse(run.stdout) as { webhooks: Record<string, unknown> };
    expect(printed.webhooks).toMatchObject({
      notification_url: "https://ops.example.com/n",
      callback_headers: ["x-make-token"],
      signature: "ed25519",
      public_key: expect.stringMatching(/^whpk_/),
    });
    expect(await ok(await settings(t, apiKey))).toMatchObject({
      notification_url: "https://ops.example.com/n",
      callback_headers: ["x-make-token"],
      signature: "ed25519",
    });
    const bad = await runCliInProcess(["clients", "update", id, "--callback-header", "Host=x"], env);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain("callback_headers.Host");
    const cleared = await runCliInProcess(
      ["clients", "update", id, "--clear-callback-headers", "--notification-url", "none"],
      env,
    );
    expect(cleared.status, cleared.stderr).toBe(0);
    expect(await ok(await settings(t, apiKey))).toMatchObject({ notification_url: null, callback_headers: null });
  });
});

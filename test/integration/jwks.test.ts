import { createHash, createPublicKey, verify, type JsonWebKey } from "node:crypto";
import { describe, expect, it, vi } from "vitest";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { sqliteStore } from "../../src/open-store.js";
import { revokeClient } from "../../src/services/clients.js";
import { JwksCache } from "../../src/services/jwks.js";
import type { Received } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * docs/contract.md, "Published keys": GET /openapi/v1/webhooks/jwks/{client_id} answers, without
 * an API key, the JWKS of an ed25519 client. A real webhook the relay sends to a loopback receiver
 * is verified here with node:crypto and nothing but the key fetched from there; an unknown, revoked
 * or hmac client is one and the same 404.
 */

const { setup, receiver } = upstreamSuite();

const jwksPath = (clientId: string) => `/openapi/v1/webhooks/jwks/${clientId}`;

interface Jwk extends JsonWebKey {
  kid: string;
  x: string;
}

async function ed25519Client(t: TestRelay, name = "ed") {
  const client = t.client(name);
  const res = await t.request(client.apiKey, "/openapi/v1/webhooks/settings", {
    method: "PUT",
    json: { signature: "ed25519" },
  });
  expect(res.status).toBe(200);
  // Past the switch's 24-hour overlap, when the hmac v1 signature still came beside v1a: v1a only.
  t.clock.advance(24 * 60 * 60_000 + 1_000);
  return client;
}

async function fetchJwks(t: TestRelay, clientId: string, headers: Record<string, string> = {}) {
  const res = await t.relay.app.request(`http://relay.test${jwksPath(clientId)}`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get("cache-control")).toBe("public, max-age=300");
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  return { etag: res.headers.get("etag")!, keys: ((await res.json()) as { keys: Jwk[] }).keys };
}

/** A test event the relay signs and sends over HTTP to a loopback receiver, as that receiver got it. */
async function realWebhook(t: TestRelay, apiKey: string): Promise<Received> {
  const r = await receiver();
  const next = r.next();
  const res = await t.request(apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: r.url() } });
  expect(res.status).toBe(200);
  return next;
}

/** The `v1a` signatures of a message that `jwk`, and only it, verifies. */
function verifiedBy(jwk: Jwk, msg: Received): string[] {
  const key = createPublicKey({ key: jwk, format: "jwk" });
  const content = Buffer.from(`${msg.headers["webhook-id"]}.${msg.headers["webhook-timestamp"]}.${msg.body}`);
  return msg.headers["webhook-signature"]!.split(" ").filter((entry) => {
    const [version, signature] = entry.split(",");
    return version === "v1a" && verify(null, content, key, Buffer.from(signature!, "base64"));
  });
}

/** RFC 7638 §3.2 for an OKP key, computed here from the key's members. */
const thumbprint = (jwk: Jwk) =>
  createHash("sha256").update(`{"crv":"${jwk.crv}","kty":"${jwk.kty}","x":"${jwk.x}"}`).digest("base64url");

describe("GET /openapi/v1/webhooks/jwks/{client_id}", () => {
  it("publishes, without an API key, the one key that verifies the relay's real v1a webhooks", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);

    const { keys } = await fetchJwks(t, client.id);
    expect(keys).toEqual([
      {
        kty: "OKP",
        crv: "Ed25519",
        kid: expect.any(String),
        x: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
        use: "sig",
        alg: "EdDSA",
      },
    ]);
    const [jwk] = keys as [Jwk];
    expect(jwk.kid).toBe(thumbprint(jwk));
    // The same key the settings show as whpk_ (base64 of the raw 32 bytes).
    const settings = (await (await t.request(client.apiKey, "/openapi/v1/webhooks/settings")).json()) as any;
    expect(Buffer.from(jwk.x, "base64url").toString("base64")).toBe(settings.data.public_key.slice("whpk_".length));

    const msg = await realWebhook(t, client.apiKey);
    expect(msg.headers["webhook-signature"]).toMatch(/^v1a,\S+$/);
    expect(verifiedBy(jwk, msg)).toHaveLength(1);
    // The key verifies this message only: another body under the same headers fails.
    expect(verifiedBy(jwk, { ...msg, body: msg.body.replace('"ping"', '"pong"') })).toEqual([]);
    // Another client's published key does not verify it.
    const other = await ed25519Client(t, "other");
    expect(verifiedBy((await fetchJwks(t, other.id)).keys[0]!, msg)).toEqual([]);
  });

  it("any Authorization header, even a bad one, is ignored; HEAD is answered too", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    const bare = await fetchJwks(t, client.id);
    expect(await fetchJwks(t, client.id, { Authorization: "Bearer grk_nope" })).toEqual(bare);
    expect(await fetchJwks(t, client.id, { Authorization: `Bearer ${client.apiKey}` })).toEqual(bare);
    const head = await t.relay.app.request(`http://relay.test${jwksPath(client.id)}`, { method: "HEAD" });
    expect(head.status).toBe(200);
  });

  it("reads no client row per request, yet answers a rotation, a revocation and the CLI's change at once (issue #38)", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    const reads = vi.spyOn(t.store.clients, "find");
    const first = await fetchJwks(t, client.id);
    for (let i = 0; i < 20; i++) expect(await fetchJwks(t, client.id)).toEqual(first);
    expect(reads).toHaveBeenCalledTimes(1);
    await t.request(client.apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    expect((await fetchJwks(t, client.id)).keys).toHaveLength(2);
    await revokeClient(t.relay.deps, client.id);
    expect((await t.relay.app.request(`http://relay.test${jwksPath(client.id)}`)).status).toBe(404);
    // Another process on the same SQLite file (the CLI) brings it back: seen by the next request.
    const other = await ed25519Client(t, "other");
    expect((await fetchJwks(t, other.id)).keys).toHaveLength(1);
    const cli = sqliteStore(openDatabase(t.config.databasePath));
    await cli.clients.update(other.id, { revokedAt: t.clock.now() });
    await cli.close();
    expect((await t.relay.app.request(`http://relay.test${jwksPath(other.id)}`)).status).toBe(404);
  });

  it("is served from a cache keyed by what decides it: a hit until a rotation, an overlap's end or a switch (issue #38)", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    const cache = new JwksCache();
    const row = async () => (await t.store.clients.find(client.id))!;
    const key = t.config.encryptionKey;
    const first = cache.get(await row(), key, t.clock.now());
    expect(first?.keys).toHaveLength(1);
    expect(cache.get(await row(), key, t.clock.now())).toBe(first);
    await t.request(client.apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    const rotated = cache.get(await row(), key, t.clock.now());
    expect(rotated?.keys).toHaveLength(2);
    expect(cache.get(await row(), key, t.clock.now())).toBe(rotated);
    // The overlap's end changes which keys sign: a new entry, the previous key gone.
    t.clock.advance(24 * 60 * 60_000 + 1);
    expect(cache.get(await row(), key, t.clock.now())?.keys).toEqual([rotated!.keys[0]]);
    await t.request(client.apiKey, "/openapi/v1/webhooks/settings", { method: "PUT", json: { signature: "hmac" } });
    t.clock.advance(24 * 60 * 60_000 + 1);
    expect(cache.get(await row(), key, t.clock.now())).toBeNull();
  });

  it("during a rotation lists the new key and the previous one, each verifying its own signature; then the new one alone", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    const before = await fetchJwks(t, client.id);

    const rotated = await t.request(client.apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    expect(rotated.status).toBe(200);
    const during = await fetchJwks(t, client.id);
    expect(during.keys).toHaveLength(2);
    const [current, previous] = during.keys as [Jwk, Jwk];
    expect(previous).toEqual(before.keys[0]);
    expect(current.kid).not.toBe(previous.kid);
    expect(current.kid).toBe(thumbprint(current));
    expect(during.etag).not.toBe(before.etag);

    const msg = await realWebhook(t, client.apiKey);
    const signatures = msg.headers["webhook-signature"]!.split(" ");
    expect(signatures).toHaveLength(2);
    const byCurrent = verifiedBy(current, msg);
    const byPrevious = verifiedBy(previous, msg);
    expect(byCurrent).toHaveLength(1);
    expect(byPrevious).toHaveLength(1);
    expect(new Set([...byCurrent, ...byPrevious])).toEqual(new Set(signatures));

    t.clock.advance(24 * 60 * 60_000 + 1);
    expect((await fetchJwks(t, client.id)).keys).toEqual([current]);
  });

  it("is cacheable: its ETag in If-None-Match is 304 without a body", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    const { etag } = await fetchJwks(t, client.id);
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    const res = await t.relay.app.request(`http://relay.test${jwksPath(client.id)}`, {
      headers: { "If-None-Match": etag },
    });
    expect(res.status).toBe(304);
    expect(res.headers.get("etag")).toBe(etag);
    expect(res.headers.get("cache-control")).toBe("public, max-age=300");
    expect(await res.text()).toBe("");
    const stale = await t.relay.app.request(`http://relay.test${jwksPath(client.id)}`, {
      headers: { "If-None-Match": '"something-else"' },
    });
    expect(stale.status).toBe(200);
  });

  it("an hmac client, an unknown id, a revoked client and an absurd id are one and the same 404", async () => {
    const { t } = setup();
    const hmac = t.client("hmac");
    const revoked = await ed25519Client(t, "revoked");
    await revokeClient(t.relay.deps, revoked.id);
    // A client that switched back to hmac keeps its key pair; it publishes it while v1a signatures
    // still come (the 24-hour overlap of the switch), then nothing.
    const switched = await ed25519Client(t, "switched");
    await t.request(switched.apiKey, "/openapi/v1/webhooks/settings", { method: "PUT", json: { signature: "hmac" } });
    await fetchJwks(t, switched.id);
    t.clock.advance(24 * 60 * 60_000 + 1_000);

    for (const id of [
      hmac.id,
      "cli_01jf3y8k2m9q7r5t3v1w0x6z4a",
      revoked.id,
      switched.id,
      "x".repeat(300),
      "%2F..%2Fsettings",
    ]) {
      const res = await t.relay.app.request(`http://relay.test${jwksPath(id)}`);
      expect(res.status, id).toBe(404);
      expect(await res.json(), id).toEqual({
        error: {
          code: "not_found",
          // Names why an hmac client has none and how it gets some, without telling which case this is.
          message:
            'No published keys for this client id: it is unknown, revoked, or signs with hmac (v1 signatures, verified with its whsec_ secret, not with keys). A client switches to Ed25519 with PUT /openapi/v1/webhooks/settings {"signature":"ed25519"}; its keys are published here from then on.',
          request_id: res.headers.get("x-request-id"),
        },
      });
      expect(res.headers.get("cache-control"), id).toBeNull();
    }
  });

  it("answers another method on this exact path with 405 and Allow, not 401 (issue #39)", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const res = await t.relay.app.request(`http://relay.test${jwksPath(client.id)}`, { method });
      expect(res.status, method).toBe(405);
      expect(res.headers.get("allow"), method).toBe("GET, HEAD");
      expect(await res.json(), method).toEqual({
        error: {
          code: "method_not_allowed",
          message: `${method} is not allowed on ${jwksPath(client.id)}; use GET, HEAD.`,
          request_id: res.headers.get("x-request-id"),
        },
      });
    }
  });

  it("exempts only this exact path from the API key", async () => {
    const { t } = setup();
    const client = await ed25519Client(t);
    for (const [method, path] of [
      ["GET", `${jwksPath(client.id)}/`],
      ["GET", `${jwksPath(client.id)}/more`],
      ["GET", "/openapi/v1/webhooks/jwks"],
      ["GET", "/openapi/v1/webhooks/jwks/"],
      ["GET", "/openapi/v1/webhooks/jwks/../settings"],
      ["GET", "/openapi/v1/webhooks/jwks/%2e%2e/settings"],
      ["GET", "/openapi/v1/webhooks/settings"],
    ] as const) {
      const res = await t.relay.app.request(`http://relay.test${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(401);
    }
  });
});

import { createPublicKey, verify } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type Received, verifyAt } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * docs/contract.md, "Rotation and switching the scheme": for 24 hours after a client's `signature` changes
 * between hmac and ed25519, every webhook carries the old scheme's signature beside the new one's,
 * so a receiver can move without losing webhooks. Real webhooks to a loopback receiver, verified
 * with the standardwebhooks package (v1) and node:crypto (v1a), never with the relay's signer.
 */
const suite = upstreamSuite();
const DAY = 86_400_000;

const settings = async (t: TestRelay, apiKey: string, body?: unknown): Promise<Record<string, string>> => {
  const res = await t.request(
    apiKey,
    "/openapi/v1/webhooks/settings",
    body === undefined ? {} : { method: "PUT", json: body },
  );
  const json = (await res.json()) as { data: Record<string, string> };
  expect(res.status, JSON.stringify(json)).toBe(200);
  return json.data;
};

async function webhook(t: TestRelay, apiKey: string): Promise<Received> {
  const r = await suite.receiver();
  const next = r.next();
  const res = await t.request(apiKey, "/openapi/v1/webhooks/test", { method: "POST", json: { url: r.url() } });
  expect(res.status).toBe(200);
  return next;
}

const versions = (msg: Received) => msg.headers["webhook-signature"]!.split(" ").map((e) => e.split(",")[0]);

/** Whether the standardwebhooks package, given the whsec_ secret, accepts the message. */
function hmacVerifies(t: TestRelay, secret: string, msg: Received): boolean {
  try {
    verifyAt(secret, msg, t.clock.now());
    return true;
  } catch {
    return false;
  }
}

/** How many of the message's v1a signatures node:crypto verifies with the whpk_ public key alone. */
function ed25519Verifies(publicKey: string, msg: Received): number {
  const x = Buffer.from(publicKey.slice("whpk_".length), "base64").toString("base64url");
  const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x }, format: "jwk" });
  const content = Buffer.from(`${msg.headers["webhook-id"]}.${msg.headers["webhook-timestamp"]}.${msg.body}`);
  return msg.headers["webhook-signature"]!.split(" ").filter((entry) => {
    const [version, signature] = entry.split(",");
    return version === "v1a" && verify(null, content, key, Buffer.from(signature!, "base64"));
  }).length;
}

async function jwksStatus(t: TestRelay, clientId: string) {
  return (await t.relay.app.request(`http://relay.test/openapi/v1/webhooks/jwks/${clientId}`)).status;
}

describe("switching the signature scheme keeps the old signature for 24 hours", () => {
  it("hmac → ed25519: v1 (standardwebhooks) and v1a (node:crypto) both verify, then only v1a", async () => {
    const { t } = suite.setup();
    const { apiKey, secret } = t.client();
    const before = await webhook(t, apiKey);
    expect(versions(before)).toEqual(["v1"]);

    const switched = await settings(t, apiKey, { signature: "ed25519" });
    const end = new Date(t.clock.now() + DAY).toISOString();
    expect(switched).toMatchObject({ signature: "ed25519", previous_signature_expires_at: end });
    const publicKey = (await settings(t, apiKey)).public_key!;
    expect(await settings(t, apiKey)).toMatchObject({ previous_signature_expires_at: end });

    const during = await webhook(t, apiKey);
    expect(versions(during)).toEqual(["v1a", "v1"]);
    expect(hmacVerifies(t, secret, during)).toBe(true);
    expect(ed25519Verifies(publicKey, during)).toBe(1);

    // Just before the end, still both.
    t.clock.advance(DAY - 1_000);
    expect(versions(await webhook(t, apiKey))).toEqual(["v1a", "v1"]);

    t.clock.advance(2_000);
    const after = await webhook(t, apiKey);
    expect(versions(after)).toEqual(["v1a"]);
    expect(hmacVerifies(t, secret, after)).toBe(false);
    expect(ed25519Verifies(publicKey, after)).toBe(1);
    expect(await settings(t, apiKey)).not.toHaveProperty("previous_signature_expires_at");
  });

  it("ed25519 → hmac: v1 and v1a both verify, the JWKS keeps the key for the overlap, then only v1 and a 404", async () => {
    const { t } = suite.setup();
    const { id, apiKey, secret } = t.client();
    const publicKey = (await settings(t, apiKey, { signature: "ed25519" })).public_key!;
    t.clock.advance(DAY + 1_000);
    expect(versions(await webhook(t, apiKey))).toEqual(["v1a"]);

    const switched = await settings(t, apiKey, { signature: "hmac" });
    expect(switched).toMatchObject({
      signature: "hmac",
      public_key: publicKey,
      previous_signature_expires_at: new Date(t.clock.now() + DAY).toISOString(),
    });
    const during = await webhook(t, apiKey);
    expect(versions(during)).toEqual(["v1", "v1a"]);
    expect(hmacVerifies(t, secret, during)).toBe(true);
    expect(ed25519Verifies(publicKey, during)).toBe(1);
    expect(await jwksStatus(t, id)).toBe(200);

    t.clock.advance(DAY + 1_000);
    const after = await webhook(t, apiKey);
    expect(versions(after)).toEqual(["v1"]);
    expect(hmacVerifies(t, secret, after)).toBe(true);
    expect(ed25519Verifies(publicKey, after)).toBe(0);
    expect(await jwksStatus(t, id)).toBe(404);
    const view = await settings(t, apiKey);
    expect(view).not.toHaveProperty("previous_signature_expires_at");
    expect(view).not.toHaveProperty("public_key");
  });

  it("a PUT with the same scheme neither starts nor restarts an overlap", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    // hmac again on an hmac client: no overlap, v1 only.
    expect(await settings(t, apiKey, { signature: "hmac" })).not.toHaveProperty("previous_signature_expires_at");
    expect(versions(await webhook(t, apiKey))).toEqual(["v1"]);

    await settings(t, apiKey, { signature: "ed25519" });
    const end = new Date(t.clock.now() + DAY).toISOString();
    t.clock.advance(DAY / 2);
    const again = await settings(t, apiKey, { signature: "ed25519", notification_url: null });
    expect(again.previous_signature_expires_at).toBe(end);
    t.clock.advance(DAY / 2 + 1_000);
    expect(versions(await webhook(t, apiKey))).toEqual(["v1a"]);
  });
});

/**
 * Issue #39 item 1: a rotation's 24-hour overlap and a switch's overlap are separate windows, and
 * no later change shortens one that is running. A receiver still on the pre-rotation secret keeps
 * verifying (standardwebhooks) until that rotation's own day ends, whatever the scheme does meanwhile.
 */
describe("rotation and scheme switches: every running overlap lasts its 24 hours (issue #39)", () => {
  const rotate = async (t: TestRelay, apiKey: string) => {
    const res = await t.request(apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    const json = (await res.json()) as { data: Record<string, string> };
    expect(res.status, JSON.stringify(json)).toBe(200);
    return json.data;
  };

  it("rotate, then switch to ed25519 7 s later: the pre-rotation secret verifies until the rotation's day ends", async () => {
    const { t } = suite.setup();
    const { apiKey, secret: old } = t.client();
    const rotatedAt = t.clock.now();
    const fresh = (await rotate(t, apiKey)).webhook_secret!;
    t.clock.advance(7_000);
    const publicKey = (await settings(t, apiKey, { signature: "ed25519" })).public_key!;

    const during = await webhook(t, apiKey);
    expect(versions(during)).toEqual(["v1a", "v1", "v1"]);
    expect(hmacVerifies(t, old, during)).toBe(true);
    expect(hmacVerifies(t, fresh, during)).toBe(true);
    expect(ed25519Verifies(publicKey, during)).toBe(1);

    t.clock.set(rotatedAt + DAY - 1_000);
    expect(hmacVerifies(t, old, await webhook(t, apiKey))).toBe(true);
    // The rotation's day is over: the old secret stops; the switch's overlap (7 s later) still sends the new one.
    t.clock.set(rotatedAt + DAY + 1_000);
    const after = await webhook(t, apiKey);
    expect(versions(after)).toEqual(["v1a", "v1"]);
    expect(hmacVerifies(t, old, after)).toBe(false);
    expect(hmacVerifies(t, fresh, after)).toBe(true);
  });

  it("switch to ed25519, then rotate: the v1 overlap and the previous v1a key both last their day", async () => {
    const { t } = suite.setup();
    const { apiKey, secret: old } = t.client();
    const switchedAt = t.clock.now();
    const first = (await settings(t, apiKey, { signature: "ed25519" })).public_key!;
    t.clock.advance(7_000);
    const second = (await rotate(t, apiKey)).public_key!;

    const during = await webhook(t, apiKey);
    expect(versions(during)).toEqual(["v1a", "v1a", "v1"]);
    expect(hmacVerifies(t, old, during)).toBe(true);
    expect(ed25519Verifies(first, during)).toBe(1);
    expect(ed25519Verifies(second, during)).toBe(1);

    t.clock.set(switchedAt + DAY + 1_000);
    const later = await webhook(t, apiKey);
    expect(versions(later)).toEqual(["v1a", "v1a"]);
    expect(hmacVerifies(t, old, later)).toBe(false);
    expect(ed25519Verifies(first, later)).toBe(1);
  });

  it("rotate, then hmac → ed25519 → hmac: the pre-rotation secret verifies at every step of its day", async () => {
    const { t } = suite.setup();
    const { apiKey, secret: old } = t.client();
    const rotatedAt = t.clock.now();
    await rotate(t, apiKey);
    for (const scheme of ["ed25519", "hmac"] as const) {
      t.clock.advance(3_600_000);
      await settings(t, apiKey, { signature: scheme });
      expect(hmacVerifies(t, old, await webhook(t, apiKey)), `after switching to ${scheme}`).toBe(true);
    }
    t.clock.set(rotatedAt + DAY - 1_000);
    expect(hmacVerifies(t, old, await webhook(t, apiKey))).toBe(true);
    t.clock.set(rotatedAt + DAY + 1_000);
    expect(hmacVerifies(t, old, await webhook(t, apiKey))).toBe(false);
  });
});

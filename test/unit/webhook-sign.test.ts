import { createHmac, createPublicKey, verify } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  generateSigningKey,
  generateWebhookSecret,
  publicKeyOf,
  signatureHeader,
  webhookHeaders,
} from "../../src/webhooks/sign.js";

// Standard Webhooks specification test vector.
const VECTOR = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
};

/** Computed here, independently of the signer under test. */
function expectedSignature(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
}

const nowSec = () => Math.floor(Date.now() / 1000);

afterEach(() => {
  vi.useRealTimers();
});

describe("signatureHeader", () => {
  it("matches the Standard Webhooks known-answer vector", () => {
    expect(signatureHeader([VECTOR.secret], VECTOR.id, VECTOR.timestamp, VECTOR.body)).toBe(VECTOR.signature);
    expect(expectedSignature(VECTOR.secret, VECTOR.id, VECTOR.timestamp, VECTOR.body)).toBe(VECTOR.signature);
  });

  it("matches an independently computed HMAC for a generated secret and a unicode body", () => {
    const secret = generateWebhookSecret();
    const body = JSON.stringify({ type: "task.succeeded", data: { prompt: "café ☕ 日本" } });
    expect(signatureHeader([secret], "evt_1", 1_700_000_000, body)).toBe(
      expectedSignature(secret, "evt_1", 1_700_000_000, body),
    );
  });

  it("emits one space-separated signature per secret, in order", () => {
    const a = generateWebhookSecret();
    const b = generateWebhookSecret();
    const header = signatureHeader([a, b], "evt_2", 1_700_000_000, "{}");
    expect(header).toBe(
      `${expectedSignature(a, "evt_2", 1_700_000_000, "{}")} ${expectedSignature(b, "evt_2", 1_700_000_000, "{}")}`,
    );
  });

  it("refuses no secrets, a secret without the whsec_ prefix, bad base64 and a fractional timestamp, without echoing the secret", () => {
    expect(() => signatureHeader([], "evt", 1, "{}")).toThrow("at least one webhook secret");
    expect(() => signatureHeader(["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "evt", 1, "{}")).toThrow(/whsec_$/);
    expect(() => signatureHeader(["whsec_not base64!"], "evt", 1, "{}")).toThrow("not valid base64");
    expect(() => signatureHeader([VECTOR.secret], "evt", 1.5, "{}")).toThrow("integer seconds");
    try {
      signatureHeader(["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "evt", 1, "{}");
    } catch (err) {
      expect((err as Error).message).not.toContain("MfKQ9r8");
    }
  });
});

describe("generateWebhookSecret", () => {
  it("is whsec_ + base64 of 32 random bytes, different every time", () => {
    const secret = generateWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(secret.slice(6), "base64")).toHaveLength(32);
    expect(generateWebhookSecret()).not.toBe(secret);
  });
});

describe("webhookHeaders verified by the standardwebhooks package", () => {
  it("carries every Standard Webhooks header and our user agent", () => {
    const headers = webhookHeaders([VECTOR.secret], VECTOR.id, VECTOR.timestamp, VECTOR.body);
    expect(headers).toEqual({
      "content-type": "application/json",
      "webhook-id": VECTOR.id,
      "webhook-timestamp": "1614265330",
      "webhook-signature": VECTOR.signature,
      "user-agent": "genrelay/0.1",
    });
  });

  it("verifies the known-answer vector at its own time", () => {
    vi.useFakeTimers({ now: VECTOR.timestamp * 1000 });
    const headers = webhookHeaders([VECTOR.secret], VECTOR.id, VECTOR.timestamp, VECTOR.body);
    expect(new Webhook(VECTOR.secret).verify(VECTOR.body, headers)).toEqual({ test: 2432232314 });
  });

  it("verifies with one secret", () => {
    const secret = generateWebhookSecret();
    const body = JSON.stringify({ type: "ping", timestamp: new Date().toISOString(), data: {} });
    const headers = webhookHeaders([secret], "evt_one", nowSec(), body);
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
  });

  it("verifies with either of two secrets alone (rotation)", () => {
    const oldSecret = generateWebhookSecret();
    const newSecret = generateWebhookSecret();
    const body = JSON.stringify({ type: "task.succeeded", data: { id: "task_1" } });
    const headers = webhookHeaders([newSecret, oldSecret], "evt_two", nowSec(), body);
    expect(new Webhook(oldSecret).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(newSecret).verify(body, headers)).toEqual(JSON.parse(body));
  });

  it("fails on a tampered body, a wrong secret, a changed id and a changed timestamp", () => {
    const secret = generateWebhookSecret();
    const body = JSON.stringify({ type: "task.succeeded", data: { id: "task_1" } });
    const ts = nowSec();
    const headers = webhookHeaders([secret], "evt_t", ts, body);
    const hook = new Webhook(secret);
    expect(() => hook.verify(body.replace("task_1", "task_2"), headers)).toThrow();
    expect(() => new Webhook(generateWebhookSecret()).verify(body, headers)).toThrow();
    expect(() => hook.verify(body, { ...headers, "webhook-id": "evt_other" })).toThrow();
    expect(() => hook.verify(body, { ...headers, "webhook-timestamp": String(ts - 1) })).toThrow();
    expect(hook.verify(body, headers)).toEqual(JSON.parse(body));
  });
});

describe("generateSigningKey", () => {
  it("makes seed then public key, distinct each time, whose v1a signatures verify with the public key", () => {
    const keys = Array.from({ length: 50 }, () => generateSigningKey());
    expect(new Set(keys).size).toBe(keys.length);
    for (const key of keys) {
      const raw = Buffer.from(key.slice("whsk_".length), "base64");
      expect(raw.length).toBe(64);
      expect(publicKeyOf(key)).toBe(`whpk_${raw.subarray(32).toString("base64")}`);
      const header = signatureHeader([key], "msg_1", 1_700_000_000, "{}");
      const publicKey = createPublicKey({
        key: { kty: "OKP", crv: "Ed25519", x: raw.subarray(32).toString("base64url") },
        format: "jwk",
      });
      const signature = Buffer.from(header.slice("v1a,".length), "base64");
      expect(verify(null, Buffer.from("msg_1.1700000000.{}"), publicKey, signature)).toBe(true);
    }
  });
});

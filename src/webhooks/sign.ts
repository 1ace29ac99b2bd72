import { createHmac, randomBytes } from "node:crypto";

/**
 * Standard Webhooks v1 signing (https://www.standardwebhooks.com/).
 * Signed content is `${msgId}.${timestampSec}.${body}`, HMAC-SHA256 with the
 * base64-decoded part of a `whsec_` secret. node:crypto directly: the
 * `standardwebhooks` package is only used by tests, as an independent verifier.
 */

const SECRET_PREFIX = "whsec_";
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
export const WEBHOOK_USER_AGENT = "genrelay/0.1";

/** A fresh `whsec_` secret: 32 random bytes, base64. */
export function generateWebhookSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString("base64");
}

function secretKey(secret: string): Buffer {
  // Errors never include the secret itself: they may end up in a log line.
  if (!secret.startsWith(SECRET_PREFIX)) throw new TypeError("webhook secret must start with whsec_");
  const encoded = secret.slice(SECRET_PREFIX.length);
  if (!BASE64.test(encoded)) throw new TypeError("webhook secret is not valid base64 after whsec_");
  return Buffer.from(encoded, "base64");
}

/** `v1,<b64>` per secret, space-separated (several during a rotation). */
export function signatureHeader(secrets: string[], msgId: string, timestampSec: number, body: string): string {
  if (secrets.length === 0) throw new TypeError("at least one webhook secret is needed to sign");
  if (!Number.isSafeInteger(timestampSec)) throw new TypeError("webhook timestamp must be integer seconds");
  const content = `${msgId}.${timestampSec}.${body}`;
  return secrets
    .map((secret) => `v1,${createHmac("sha256", secretKey(secret)).update(content, "utf8").digest("base64")}`)
    .join(" ");
}

/** Every header of one delivery attempt (lower-case names). */
export function webhookHeaders(
  secrets: string[],
  msgId: string,
  timestampSec: number,
  body: string,
): Record<string, string> {
  return {
    "content-type": "application/json",
    "webhook-id": msgId,
    "webhook-timestamp": String(timestampSec),
    "webhook-signature": signatureHeader(secrets, msgId, timestampSec, body),
    "user-agent": WEBHOOK_USER_AGENT,
  };
}

import { createHmac, timingSafeEqual } from "node:crypto";

/** How far a webhook's timestamp may be from this clock, as the Standard Webhooks libraries allow. */
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

export type SignatureVerdict = { ok: true } | { ok: false; reason: string };

type Headers = Record<string, string | string[] | undefined>;

function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Checks a genrelay webhook as Standard Webhooks defines it: `webhook-signature` holds one or more
 * space-separated `v1,<base64 HMAC-SHA256>` entries (two during a secret rotation) of
 * "{webhook-id}.{webhook-timestamp}.{raw body}", keyed with the base64-decoded bytes after `whsec_`.
 * The raw body is the bytes as they arrived: parsing and re-serializing JSON would change them.
 */
export function verifyWebhook(
  secret: string,
  headers: Headers,
  rawBody: Buffer | undefined,
  nowSeconds: number,
): SignatureVerdict {
  const key = Buffer.from(secret.trim().replace(/^whsec_/, ""), "base64");
  if (key.length === 0) return { ok: false, reason: "the credential has no webhook secret" };
  if (rawBody === undefined) return { ok: false, reason: "the request has no body" };
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures)
    return { ok: false, reason: "missing webhook-id, webhook-timestamp or webhook-signature" };
  if (!/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: "webhook-timestamp is not a unix time" };
  if (Math.abs(nowSeconds - Number(timestamp)) > TIMESTAMP_TOLERANCE_SECONDS) {
    return { ok: false, reason: "webhook-timestamp is more than 5 minutes from this clock" };
  }
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.`).update(rawBody).digest();
  for (const entry of signatures.split(" ")) {
    const [version, signature] = entry.split(",", 2);
    if (version !== "v1" || !signature) continue;
    const given = Buffer.from(signature, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true };
  }
  return { ok: false, reason: "no v1 signature matches" };
}

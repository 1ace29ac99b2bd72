"use strict";

const { createHmac, timingSafeEqual } = require("node:crypto");

/** How far a webhook's timestamp may be from this clock, as the Standard Webhooks libraries allow. */
const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

/** A header of Zapier's raw request, whatever its case and whether or not Zapier prefixed it with `Http-`. */
const header = (headers, name) => {
  for (const [key, value] of Object.entries(headers || {})) {
    const bare = key.toLowerCase().replace(/^http-/, "");
    if (bare === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
};

/**
 * Why a webhook fails its Standard Webhooks check, or null when it passes: `webhook-signature` holds
 * space-separated `v1,<base64 HMAC-SHA256>` entries of "{webhook-id}.{webhook-timestamp}.{raw body}"
 * keyed with the base64-decoded bytes after `whsec_`.
 */
const signatureProblem = (secret, headers, rawBody, nowSeconds) => {
  const key = Buffer.from(
    String(secret)
      .trim()
      .replace(/^whsec_/, ""),
    "base64",
  );
  if (key.length === 0) return "no webhook secret";
  if (typeof rawBody !== "string") return "no raw body";
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) return "missing webhook-id, webhook-timestamp or webhook-signature";
  if (!/^\d{1,12}$/.test(timestamp)) return "webhook-timestamp is not a unix time";
  if (Math.abs(nowSeconds - Number(timestamp)) > TIMESTAMP_TOLERANCE_SECONDS) {
    return "webhook-timestamp is more than 5 minutes from this clock";
  }
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${rawBody}`).digest();
  for (const entry of signatures.split(" ")) {
    const [version, signature] = entry.split(",", 2);
    if (version !== "v1" || !signature) continue;
    const given = Buffer.from(signature, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) return null;
  }
  return "no v1 signature matches";
};

module.exports = { TIMESTAMP_TOLERANCE_SECONDS, signatureProblem };

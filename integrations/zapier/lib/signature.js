"use strict";

const { createHmac, createPublicKey, timingSafeEqual, verify } = require("node:crypto");

/** How far a webhook's timestamp may be from this clock, as the Standard Webhooks libraries allow. */
const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

/** How long a fetched JWKS is used as it is: its Cache-Control (max-age=300). */
const JWKS_MAX_AGE_MS = 300_000;

/** A JWKS is fetched again, when none of its keys verifies a signature, at most this often. */
const JWKS_REFETCH_MS = 60_000;

/** The keys of each JWKS URL, by kid, and when they were fetched: kept across runs of this process. */
const jwksCache = new Map();

/**
 * When each JWKS URL was last asked for, whether the answer came or not: a relay that fails to
 * answer (or a flood of forged `v1a` webhooks) costs one fetch a minute, never one per webhook.
 */
const jwksAskedAt = new Map();

/** The webhook-ids accepted lately, with when each may be forgotten: a replay inside the tolerance is a duplicate. */
const accepted = new Map();
const ACCEPTED_MAX = 10_000;

/** A header of Zapier's raw request, whatever its case and whether or not Zapier prefixed it with `Http-`. */
const header = (headers, name) => {
  for (const [key, value] of Object.entries(headers || {})) {
    const bare = key.toLowerCase().replace(/^http-/, "");
    if (bare === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
};

/** Fetches a JWKS ({url, fetch}) and keeps its Ed25519 keys by kid (a key already known keeps its KeyObject). */
const fetchKeys = async (jwks) => {
  const fetchedAt = Date.now();
  jwksAskedAt.set(jwks.url, fetchedAt);
  const known = jwksCache.get(jwks.url)?.keys || new Map();
  const body = await jwks.fetch(jwks.url);
  const keys = new Map();
  for (const jwk of Array.isArray(body?.keys) ? body.keys : []) {
    if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.x !== "string") continue;
    const kid = typeof jwk.kid === "string" ? jwk.kid : jwk.x;
    keys.set(kid, known.get(kid) || createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: jwk.x }, format: "jwk" }));
  }
  jwksCache.set(jwks.url, { keys, fetchedAt });
  return keys;
};

/** Whether one of the `v1a` signatures verifies `content` with one of the keys. */
const signedBy = (signatures, content, keys) => {
  for (const key of keys) {
    for (const signature of signatures) {
      try {
        if (verify(null, content, key, Buffer.from(signature, "base64"))) return true;
      } catch {
        // not an Ed25519 signature: the next one may be
      }
    }
  }
  return false;
};

/**
 * Why a webhook fails its Standard Webhooks check, or null when it passes: `webhook-signature` holds
 * space-separated signatures of "{webhook-id}.{webhook-timestamp}.{raw body}", and any one that
 * verifies passes. `v1,<base64 HMAC-SHA256>` entries are keyed with the base64-decoded bytes after
 * `whsec_` (`secret`); `v1a,<base64 Ed25519>` entries verify with a key of the client's published
 * JWKS (`jwks`: {url, fetch}), kept by kid and fetched again when none of its keys verifies (a
 * rotation; at most once a minute). During an overlap both keys, or both schemes, are listed.
 */
const signatureProblem = async ({ secret, jwks, schemes = SCHEMES }, headers, rawBody, nowSeconds) => {
  const givenKey = Buffer.from(
    String(secret || "")
      .trim()
      .replace(/^whsec_/, ""),
    "base64",
  );
  if (givenKey.length === 0 && !jwks) return "the connection has neither a webhook secret nor a client ID";
  // Only the schemes the client signs with count: a leaked old secret cannot pass for an ed25519 client.
  const key = schemes.includes("hmac") ? givenKey : Buffer.alloc(0);
  if (!schemes.includes("ed25519")) jwks = undefined;
  if (key.length === 0 && !jwks) return missingFor(schemes);
  if (typeof rawBody !== "string") return "no raw body";
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) return "missing webhook-id, webhook-timestamp or webhook-signature";
  if (!/^\d{1,12}$/.test(timestamp)) return "webhook-timestamp is not a unix time";
  if (Math.abs(nowSeconds - Number(timestamp)) > TIMESTAMP_TOLERANCE_SECONDS) {
    return "webhook-timestamp is more than 5 minutes from this clock";
  }
  const entries = signatures.split(" ").map((entry) => entry.split(",", 2));
  const listed = (wanted) => entries.filter(([version, sig]) => version === wanted && sig).map(([, sig]) => sig);
  if (key.length > 0) {
    const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${rawBody}`).digest();
    for (const signature of listed("v1")) {
      const given = Buffer.from(signature, "base64");
      if (given.length === expected.length && timingSafeEqual(given, expected)) return null;
    }
  }
  const ed25519 = listed("v1a");
  if (jwks && ed25519.length > 0) {
    const content = Buffer.from(`${id}.${timestamp}.${rawBody}`);
    const cached = jwksCache.get(jwks.url);
    const mayAsk = () => Date.now() - (jwksAskedAt.get(jwks.url) || 0) >= JWKS_REFETCH_MS;
    try {
      const fresh = cached && Date.now() - cached.fetchedAt < JWKS_MAX_AGE_MS;
      // Stale keys are asked for again at most once a minute, and used meanwhile.
      if (!cached && !mayAsk()) return "the client's published keys could not be read lately; asked again in a minute";
      const keys = fresh || (cached && !mayAsk()) ? cached.keys : await fetchKeys(jwks);
      if (signedBy(ed25519, content, keys.values())) return null;
      // No known key verifies: the client may have rotated its key since. Ask again, at most once a minute.
      if (mayAsk() && signedBy(ed25519, content, (await fetchKeys(jwks)).values())) return null;
    } catch (error) {
      return `the client's published keys could not be read (${error.message})`;
    }
  }
  return `no ${[key.length > 0 ? "v1" : "", jwks ? "v1a" : ""].filter(Boolean).join(" or ")} signature matches`;
};

/** The two signing schemes a genrelay client may use (GET /openapi/v1/webhooks/settings, `signature`). */
const SCHEMES = ["hmac", "ed25519"];

/** Why a connection cannot verify any signature of a client signing with `schemes`. */
const missingFor = (schemes) =>
  schemes.includes("hmac")
    ? "the client signs with hmac: add its webhook secret (whsec_…) to the connection"
    : "the client signs with ed25519: add its Client ID (cli_…) to the connection";

/**
 * The schemes whose signatures count for a client, from its webhook settings: the one it signs with
 * and, during a switch's 24-hour overlap, the other one still sent beside it.
 */
const schemesOf = (settings, nowMs) => {
  const current = SCHEMES.includes(settings?.signature) ? settings.signature : undefined;
  if (!current) return SCHEMES;
  const overlap = Date.parse(settings.previous_signature_expires_at || "");
  return overlap > nowMs ? SCHEMES : [current];
};

/**
 * Whether a verified webhook's id is new: an id accepted before is a duplicate (a replay, or a retry
 * of a delivery whose answer was lost), remembered until its timestamp leaves the tolerance window.
 */
const firstDelivery = (id, timestampSeconds, nowMs) => {
  for (const [known, until] of accepted) {
    if (until > nowMs && accepted.size < ACCEPTED_MAX) break;
    accepted.delete(known); // oldest first: Maps keep insertion order
  }
  if (accepted.has(id) && accepted.get(id) > nowMs) return false;
  accepted.set(id, (Number(timestampSeconds) + TIMESTAMP_TOLERANCE_SECONDS) * 1000 + 60_000);
  return true;
};

module.exports = {
  SCHEMES,
  TIMESTAMP_TOLERANCE_SECONDS,
  firstDelivery,
  header,
  missingFor,
  schemesOf,
  signatureProblem,
};

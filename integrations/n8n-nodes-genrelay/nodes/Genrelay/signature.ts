import { createHmac, createPublicKey, type KeyObject, timingSafeEqual, verify } from "node:crypto";

/** How far a webhook's timestamp may be from this clock, as the Standard Webhooks libraries allow. */
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

/** How long a fetched JWKS is used as it is: its Cache-Control (max-age=300). */
const JWKS_MAX_AGE_MS = 300_000;

/** A JWKS is fetched again, when none of its keys verifies a signature, at most this often. */
const JWKS_REFETCH_MS = 60_000;

export type SignatureVerdict = { ok: true } | { ok: false; reason: string };

type Headers = Record<string, string | string[] | undefined>;

/** Where a client's published Ed25519 keys come from, and how to fetch them (n8n's request helper). */
export interface JwksSource {
  url: string;
  fetch: (url: string) => Promise<unknown>;
}

/** The keys of each JWKS URL, by kid, and when they were fetched: kept across webhooks of this process. */
const jwksCache = new Map<string, { keys: Map<string, KeyObject>; fetchedAt: number }>();

function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Fetches a JWKS and keeps its Ed25519 keys by kid (a key already known keeps its KeyObject). */
async function fetchKeys(source: JwksSource): Promise<Map<string, KeyObject>> {
  const fetchedAt = Date.now();
  const known = jwksCache.get(source.url)?.keys ?? new Map<string, KeyObject>();
  const jwks = (await source.fetch(source.url)) as { keys?: Array<Record<string, unknown>> } | undefined;
  const keys = new Map<string, KeyObject>();
  for (const jwk of Array.isArray(jwks?.keys) ? jwks.keys : []) {
    if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.x !== "string") continue;
    const kid = typeof jwk.kid === "string" ? jwk.kid : jwk.x;
    keys.set(kid, known.get(kid) ?? createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: jwk.x }, format: "jwk" }));
  }
  jwksCache.set(source.url, { keys, fetchedAt });
  return keys;
}

/** Whether one of the `v1a` signatures verifies `content` with one of the keys. */
function signedBy(signatures: string[], content: Buffer, keys: Iterable<KeyObject>): boolean {
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
}

/**
 * Checks a genrelay webhook as Standard Webhooks defines it: `webhook-signature` holds one or more
 * space-separated signatures of "{webhook-id}.{webhook-timestamp}.{raw body}", and the webhook passes
 * when any one of them verifies. `v1,<base64 HMAC-SHA256>` entries are keyed with the base64-decoded
 * bytes after `whsec_` (the credential's webhook secret); `v1a,<base64 Ed25519>` entries (a client
 * with `signature: "ed25519"`) verify with a key of the client's published JWKS, kept by kid and
 * fetched again when none of its keys verifies (a rotation; at most once a minute). During a
 * rotation's or a scheme switch's overlap both keys, or both schemes, are listed. The raw body is
 * the bytes as they arrived: parsing and re-serializing JSON would change them.
 */
export async function verifyWebhook(
  secret: string,
  jwks: JwksSource | undefined,
  headers: Headers,
  rawBody: Buffer | undefined,
  nowSeconds: number,
): Promise<SignatureVerdict> {
  const key = Buffer.from(secret.trim().replace(/^whsec_/, ""), "base64");
  if (key.length === 0 && jwks === undefined) {
    return { ok: false, reason: "the credential has neither a webhook secret nor a client ID" };
  }
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
  const entries = signatures.split(" ").map((entry) => entry.split(",", 2) as [string, string | undefined]);
  const hmac = entries.filter(([version, sig]) => version === "v1" && sig).map(([, sig]) => sig as string);
  const ed25519 = entries.filter(([version, sig]) => version === "v1a" && sig).map(([, sig]) => sig as string);
  if (key.length > 0 && hmac.length > 0) {
    const expected = createHmac("sha256", key).update(`${id}.${timestamp}.`).update(rawBody).digest();
    for (const signature of hmac) {
      const given = Buffer.from(signature, "base64");
      if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true };
    }
  }
  if (jwks !== undefined && ed25519.length > 0) {
    const content = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), rawBody]);
    const cached = jwksCache.get(jwks.url);
    try {
      const fresh = cached !== undefined && Date.now() - cached.fetchedAt < JWKS_MAX_AGE_MS;
      if (signedBy(ed25519, content, (fresh ? cached.keys : await fetchKeys(jwks)).values())) return { ok: true };
      // No known key verifies: the client may have rotated its key since. Ask again, at most once a minute.
      const last = jwksCache.get(jwks.url)?.fetchedAt ?? 0;
      if (Date.now() - last >= JWKS_REFETCH_MS && signedBy(ed25519, content, (await fetchKeys(jwks)).values())) {
        return { ok: true };
      }
    } catch (error) {
      return { ok: false, reason: `the client's published keys could not be read: ${(error as Error).message}` };
    }
  }
  const tried = [key.length > 0 ? "v1" : "", jwks !== undefined ? "v1a" : ""].filter(Boolean).join(" or ");
  return { ok: false, reason: `no ${tried} signature matches` };
}

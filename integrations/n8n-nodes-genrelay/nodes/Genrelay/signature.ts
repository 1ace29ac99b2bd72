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

/**
 * When each JWKS URL was last asked for, whether the answer came or not: a relay that fails to
 * answer (or a flood of forged `v1a` webhooks) costs one fetch a minute, never one per webhook.
 */
const jwksAskedAt = new Map<string, number>();

/** The two signing schemes a genrelay client may use (GET /openapi/v1/webhooks/settings, `signature`). */
export type SigningScheme = "hmac" | "ed25519";
export const SCHEMES: SigningScheme[] = ["hmac", "ed25519"];

/**
 * The schemes whose signatures count for a client, from its webhook settings: the one it signs with
 * and, during a switch's 24-hour overlap, the other one still sent beside it.
 */
export function schemesOf(settings: Record<string, unknown> | undefined, nowMs: number): SigningScheme[] {
  const current = SCHEMES.find((scheme) => scheme === settings?.signature);
  if (current === undefined) return SCHEMES;
  const overlap = Date.parse(String(settings?.previous_signature_expires_at ?? ""));
  return overlap > nowMs ? SCHEMES : [current];
}

/** Why a credential cannot verify any signature of a client signing with `schemes`, or undefined. */
export function verificationProblem(secret: string, clientId: string, schemes: SigningScheme[]): string | undefined {
  if (secret === "" && clientId === "") return "the credential has neither a webhook secret nor a client ID";
  if (schemes.includes("hmac") && secret !== "") return undefined;
  if (schemes.includes("ed25519") && clientId !== "") return undefined;
  return schemes.includes("hmac")
    ? "the client signs with hmac: add its webhook secret (whsec_…) to the credential"
    : "the client signs with ed25519: add its client ID (cli_…) to the credential";
}

/** The webhook-ids accepted lately, with when each may be forgotten: a replay inside the tolerance is a duplicate. */
const accepted = new Map<string, number>();
const ACCEPTED_MAX = 10_000;

/**
 * Whether a verified webhook's id is new: an id accepted before is a duplicate (a replay, or the
 * relay's retry of a delivery whose answer was lost), remembered until its timestamp leaves the
 * tolerance window.
 */
export function firstDelivery(id: string, timestampSeconds: string, nowMs: number): boolean {
  for (const [known, until] of accepted) {
    if (until > nowMs && accepted.size < ACCEPTED_MAX) break;
    accepted.delete(known); // oldest first: Maps keep insertion order
  }
  if ((accepted.get(id) ?? 0) > nowMs) return false;
  accepted.set(id, (Number(timestampSeconds) + TIMESTAMP_TOLERANCE_SECONDS) * 1000 + 60_000);
  return true;
}

export function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** Fetches a JWKS and keeps its Ed25519 keys by kid (a key already known keeps its KeyObject). */
async function fetchKeys(source: JwksSource): Promise<Map<string, KeyObject>> {
  const fetchedAt = Date.now();
  jwksAskedAt.set(source.url, fetchedAt);
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
  givenJwks: JwksSource | undefined,
  headers: Headers,
  rawBody: Buffer | undefined,
  nowSeconds: number,
  schemes: SigningScheme[] = SCHEMES,
): Promise<SignatureVerdict> {
  const givenKey = Buffer.from(secret.trim().replace(/^whsec_/, ""), "base64");
  const missing = verificationProblem(givenKey.length > 0 ? "set" : "", givenJwks ? "set" : "", schemes);
  if (missing !== undefined) return { ok: false, reason: missing };
  // Only the schemes the client signs with count: a leaked old secret cannot pass for an ed25519 client.
  const key = schemes.includes("hmac") ? givenKey : Buffer.alloc(0);
  const jwks = schemes.includes("ed25519") ? givenJwks : undefined;
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
    const mayAsk = () => Date.now() - (jwksAskedAt.get(jwks.url) ?? 0) >= JWKS_REFETCH_MS;
    try {
      const fresh = cached !== undefined && Date.now() - cached.fetchedAt < JWKS_MAX_AGE_MS;
      // Stale keys are asked for again at most once a minute, and used meanwhile.
      if (cached === undefined && !mayAsk()) {
        return { ok: false, reason: "the client's published keys could not be read lately; asked again in a minute" };
      }
      const keys = cached !== undefined && (fresh || !mayAsk()) ? cached.keys : await fetchKeys(jwks);
      if (signedBy(ed25519, content, keys.values())) return { ok: true };
      // No known key verifies: the client may have rotated its key since. Ask again, at most once a minute.
      if (mayAsk() && signedBy(ed25519, content, (await fetchKeys(jwks)).values())) return { ok: true };
    } catch (error) {
      return { ok: false, reason: `the client's published keys could not be read: ${(error as Error).message}` };
    }
  }
  const tried = [key.length > 0 ? "v1" : "", jwks !== undefined ? "v1a" : ""].filter(Boolean).join(" or ");
  return { ok: false, reason: `no ${tried} signature matches` };
}

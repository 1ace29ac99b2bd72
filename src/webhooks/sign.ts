import { createHmac, createPrivateKey, createPublicKey, type KeyObject, randomBytes, sign } from "node:crypto";

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

/**
 * Standard Webhooks asymmetric signing: a `whsk_` signing key is base64 of the 64-byte Ed25519
 * secret key (32-byte seed then 32-byte public key, libsodium's layout), its `whpk_` public key
 * base64 of the raw 32 bytes. Signatures are `v1a,<base64 Ed25519 signature>`.
 */
const SIGNING_KEY_PREFIX = "whsk_";
const PUBLIC_KEY_PREFIX = "whpk_";

/** PKCS#8 DER of an Ed25519 private key, up to its 32-byte seed (RFC 8410). */
const ED25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/**
 * A new signing key from a random seed. Not through `generateKeyPairSync`: Node 20 can deadlock
 * when a GC during the export of a freshly generated key pair finalizes its key-generation job,
 * whose destructor takes the lock the export holds (seen as a test process hung in
 * `KeyGenJob::~KeyGenJob` under `ExportJWK`). A key made from the seed has no such job.
 */
export function generateSigningKey(): string {
  const seed = randomBytes(32);
  const privateKey = createPrivateKey({
    key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]),
    format: "der",
    type: "pkcs8",
  });
  return SIGNING_KEY_PREFIX + Buffer.concat([seed, rawPublicKey(privateKey)]).toString("base64");
}

/** The raw 32-byte Ed25519 public key of a private key: the end of its SPKI DER (RFC 8410). */
function rawPublicKey(privateKey: KeyObject): Buffer {
  const spki = createPublicKey(privateKey).export({ format: "der", type: "spki" });
  return spki.subarray(spki.length - 32);
}

function signingKeyBytes(key: string): Buffer {
  const raw = Buffer.from(key.slice(SIGNING_KEY_PREFIX.length), "base64");
  if (!BASE64.test(key.slice(SIGNING_KEY_PREFIX.length)) || raw.length !== 64)
    throw new TypeError("signing key is not 64 bytes of base64 after whsk_");
  return raw;
}

function privateKeyOf(key: string) {
  const raw = signingKeyBytes(key);
  return createPrivateKey({
    key: {
      kty: "OKP",
      crv: "Ed25519",
      d: raw.subarray(0, 32).toString("base64url"),
      x: raw.subarray(32).toString("base64url"),
    },
    format: "jwk",
  });
}

/** `whpk_<base64 of the raw 32-byte public key>`, derived from the seed (not trusted from the stored half). */
export function publicKeyOf(signingKey: string): string {
  return PUBLIC_KEY_PREFIX + rawPublicKey(privateKeyOf(signingKey)).toString("base64");
}

/**
 * One signature per active key, space-separated (several during a rotation): `v1,<b64 HMAC>` for a
 * `whsec_` secret, `v1a,<b64 Ed25519>` for a `whsk_` signing key.
 */
export function signatureHeader(secrets: string[], msgId: string, timestampSec: number, body: string): string {
  if (secrets.length === 0) throw new TypeError("at least one webhook secret is needed to sign");
  if (!Number.isSafeInteger(timestampSec)) throw new TypeError("webhook timestamp must be integer seconds");
  const content = `${msgId}.${timestampSec}.${body}`;
  return secrets
    .map((secret) =>
      secret.startsWith(SIGNING_KEY_PREFIX)
        ? `v1a,${sign(null, Buffer.from(content, "utf8"), privateKeyOf(secret)).toString("base64")}`
        : `v1,${createHmac("sha256", secretKey(secret)).update(content, "utf8").digest("base64")}`,
    )
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

import {
  createHmac,
  createPrivateKey,
  createPublicKey,
  createSecretKey,
  type KeyObject,
  randomBytes,
  sign,
} from "node:crypto";
import { LRUCache } from "lru-cache";

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

/** A secret's key material, imported once: the HMAC key (`v1`) or the Ed25519 private key (`v1a`). */
interface Signer {
  v1a: boolean;
  key: KeyObject;
}

/**
 * Signers by secret: a client's secret signs every one of its messages, and importing it (the
 * base64 check and decode, and for Ed25519 a private key from its JWK, the larger part of a
 * signature's cost) once per secret rather than once per message. Bounded: the last 1,000
 * secrets used. Held in memory like the client rows that hold the secrets.
 */
const signers = new LRUCache<string, Signer>({ max: 1_000 });

function signerOf(secret: string): Signer {
  let signer = signers.get(secret);
  if (signer === undefined) {
    signer = secret.startsWith(SIGNING_KEY_PREFIX)
      ? { v1a: true, key: privateKeyOf(secret) }
      : { v1a: false, key: createSecretKey(secretKey(secret)) };
    signers.set(secret, signer);
  }
  return signer;
}

function signatureOf(secret: string, content: string): string {
  const { v1a, key } = signerOf(secret);
  return v1a
    ? `v1a,${sign(null, Buffer.from(content, "utf8"), key).toString("base64")}`
    : `v1,${createHmac("sha256", key).update(content, "utf8").digest("base64")}`;
}

/**
 * One signature per active key, space-separated (several during a rotation): `v1,<b64 HMAC>` for a
 * `whsec_` secret, `v1a,<b64 Ed25519>` for a `whsk_` signing key.
 */
export function signatureHeader(secrets: string[], msgId: string, timestampSec: number, body: string): string {
  if (secrets.length === 0) throw new TypeError("at least one webhook secret is needed to sign");
  if (!Number.isSafeInteger(timestampSec)) throw new TypeError("webhook timestamp must be integer seconds");
  const content = `${msgId}.${timestampSec}.${body}`;
  let header = signatureOf(secrets[0]!, content);
  for (let i = 1; i < secrets.length; i++) header += ` ${signatureOf(secrets[i]!, content)}`;
  return header;
}

/** The content type of every message: the body is JSON. */
export const WEBHOOK_CONTENT_TYPE = "application/json";

/** Every header of one delivery attempt (lower-case names). */
export function webhookHeaders(
  secrets: string[],
  msgId: string,
  timestampSec: number,
  body: string,
): Record<string, string> {
  return {
    "content-type": WEBHOOK_CONTENT_TYPE,
    "webhook-id": msgId,
    "webhook-timestamp": String(timestampSec),
    "webhook-signature": signatureHeader(secrets, msgId, timestampSec, body),
    "user-agent": WEBHOOK_USER_AGENT,
  };
}

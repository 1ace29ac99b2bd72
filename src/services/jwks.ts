import { createHash } from "node:crypto";
import type { ClientRow } from "../store/rows.js";
import type { ClientRows } from "./client-rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { signingSlots } from "../webhooks/signing-keys.js";
import { publicKeys } from "./webhook-settings.js";

/**
 * A client's published keys (docs/contract.md, "Published keys"): the Ed25519 public keys that
 * verify its `v1a` signatures now, as an RFC 7517 JWK Set of RFC 8037 OKP keys. Read without an
 * API key, so it only reads: one client lookup, no write, no upstream call.
 */
export interface Jwk {
  kty: "OKP";
  crv: "Ed25519";
  /** RFC 7638 thumbprint of the key: the same key always has the same kid. */
  kid: string;
  /** base64url of the raw 32-byte public key. */
  x: string;
  use: "sig";
  alg: "EdDSA";
}

export interface Jwks {
  keys: Jwk[];
}

/** Longer than any id the relay makes: refused before the database is asked. */
const MAX_CLIENT_ID = 64;

/** The JWK of a `whpk_` public key (base64 of the raw 32 bytes). */
export function jwkOf(publicKey: string): Jwk {
  const x = Buffer.from(publicKey.slice("whpk_".length), "base64").toString("base64url");
  // RFC 7638 §3.2: the required members of an OKP key, in lexicographic order, without white space.
  const canonical = JSON.stringify({ crv: "Ed25519", kty: "OKP", x });
  const kid = createHash("sha256").update(canonical).digest("base64url");
  return { kty: "OKP", crv: "Ed25519", kid, x, use: "sig", alg: "EdDSA" };
}

/** The current key and, while a rotation overlaps, the previous one still signing beside it. */
export function publishedKeys(client: ClientRow, encryptionKey: Buffer | null, now: number): Jwks | null {
  const keys = client.revokedAt === null ? publicKeys(client, encryptionKey, now) : null;
  if (!keys) return null;
  return { keys: [keys.current, ...(keys.previous ? [keys.previous.key] : [])].map(jwkOf) };
}

/**
 * Why there are no keys, naming the fix for the one case a client can fix itself. The same for an
 * unknown, revoked or hmac client: a caller without a key learns nothing about which ids exist.
 */
export const NO_PUBLISHED_KEYS =
  'No published keys for this client id: it is unknown, revoked, or signs with hmac (v1 signatures, verified with its whsec_ secret, not with keys). A client switches to Ed25519 with PUT /openapi/v1/webhooks/settings {"signature":"ed25519"}; its keys are published here from then on.';

/**
 * Published key sets by what decides them: the client, its revocation, which keys sign now
 * (signingSlots, no cryptography) and those keys as stored. A rotation, a switch of scheme, a
 * revocation or the end of an overlap, made by this instance or another on the same database,
 * changes the key, so a stale answer is never found; a hit skips the decryption and the key
 * derivation that made this public route cost about a millisecond of CPU per request. Bounded:
 * the oldest entry goes first.
 */
export class JwksCache {
  private readonly entries = new Map<string, Jwks | null>();
  constructor(private readonly max = 10_000) {}

  get(client: ClientRow, encryptionKey: Buffer | null, now: number): Jwks | null {
    const slots = signingSlots(client, now);
    const key = [
      client.id,
      client.revokedAt,
      ...slots.map((slot) => `${slot}=${client[slot]}`),
      slots.includes("previousSigningKey") ? client.previousSigningKeyExpiresAt : "",
    ].join("\n");
    if (this.entries.has(key)) return this.entries.get(key)!;
    const jwks = publishedKeys(client, encryptionKey, now);
    if (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, jwks);
    return jwks;
  }
}

/** The JWKS of `clientId`, or 404 not_found (NO_PUBLISHED_KEYS). */
export async function getClientJwks(
  deps: Pick<ServiceDeps, "store" | "clock" | "config">,
  clientId: string,
  cache?: JwksCache,
  rows?: ClientRows,
) {
  const find = (id: string) => (rows ? rows.find(id) : deps.store.clients.find(id));
  const client = clientId.length <= MAX_CLIENT_ID ? await find(clientId) : undefined;
  const now = deps.clock.now();
  const key = deps.config.encryptionKey;
  const jwks = client ? (cache ? cache.get(client, key, now) : publishedKeys(client, key, now)) : null;
  if (!jwks) throw new ApiError("not_found", NO_PUBLISHED_KEYS);
  return jwks;
}

import { createCipheriv, createDecipheriv, hash, randomBytes, timingSafeEqual } from "node:crypto";

export const API_KEY_PREFIX = "grk_";

/** A relay API key: `grk_` + 32 random bytes, base64url. Shown once, stored only as a hash. */
export function generateApiKey(): string {
  return API_KEY_PREFIX + randomBytes(32).toString("base64url");
}

/** SHA-256 is enough for a 256-bit random key: no dictionary to guess from, so no slow hash needed. */
export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

/** Constant-time equality of two hex digests of equal length. */
export function digestsEqual(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** AES-256-GCM; the result is `iv.tag.ciphertext`, each base64. */
export function encryptSecret(plaintext: string, key: Buffer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const data = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return [iv, cipher.getAuthTag(), data].map((b) => b.toString("base64")).join(".");
}

export function decryptSecret(sealed: string, key: Buffer): string {
  const [iv, tag, data] = sealed.split(".").map((p) => Buffer.from(p, "base64"));
  if (!iv || !tag || !data) throw new Error("malformed encrypted value");
  const decipher = createDecipheriv("aes-256-gcm", key, iv);
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(data), decipher.final()]).toString("utf8");
}

/** Stable JSON: object keys sorted, so two bodies that differ only in key order hash the same. */
export function canonicalJson(value: unknown): string {
  // One string built in place (no filter/map arrays per object): twice a creation (issue #43).
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) {
      // As join() writes an element that has no JSON (undefined): nothing.
      out += `${i === 0 ? "" : ","}${canonicalJson(value[i]) ?? ""}`;
    }
    return `${out}]`;
  }
  const record = value as Record<string, unknown>;
  let out = "";
  for (const k of Object.keys(record).sort()) {
    const v = record[k];
    if (v !== undefined) out += `${out === "" ? "" : ","}${JSON.stringify(k)}:${canonicalJson(v)}`;
  }
  return `{${out}}`;
}

export function sha256Hex(text: string): string {
  // One-shot (text as UTF-8): half the cost of createHash().update().digest(), three times a creation.
  return hash("sha256", text, "hex");
}

/** Secrets at rest: AES-256-GCM under RELAY_ENCRYPTION_KEY when it is set, marked by this prefix. */
const SEALED = "enc:v1:";

export function sealSecret(secret: string, key: Buffer | null): string {
  return key ? SEALED + encryptSecret(secret, key) : secret;
}

/** The plain secret of a stored value (sealed or, from before the key was set, plain). */
export function openSecret(stored: string, key: Buffer | null): string {
  if (!stored.startsWith(SEALED)) return stored;
  if (!key) throw new Error("a webhook secret is encrypted: RELAY_ENCRYPTION_KEY must be set to sign webhooks");
  return decryptSecret(stored.slice(SEALED.length), key);
}

export function isSealed(stored: string): boolean {
  return stored.startsWith(SEALED);
}

import { LRUCache } from "lru-cache";
import { isSealed, openSecret } from "../crypto.js";
import type { ClientRow } from "../store/rows.js";

/** Where a client's signing keys are kept: a `whsec_` secret (v1) and a `whsk_` key (v1a), each current and previous. */
type KeySlot = "webhookSecret" | "previousWebhookSecret" | "signingKey" | "previousSigningKey";

/**
 * Which of a client's keys sign its messages now, by one rule: every key signs while its own
 * window runs, and no later change shortens a window that is running but a second rotation of the
 * same kind, which replaces the previous key on purpose (docs/contract.md, "Rotation and switching
 * the scheme").
 * - The current key of the client's scheme: always.
 * - The other scheme's current key: for 24 hours after the last switch of scheme.
 * - A previous key (`whsec_` or `whsk_`): until its own rotation's 24-hour overlap ends, whatever
 *   the scheme is now, so a switch right after a rotation keeps the pre-rotation key signing.
 * The client's own scheme first, its current key before its previous one.
 */
export function signingSlots(client: ClientRow, now: number): KeySlot[] {
  const running = (until: number | null) => until !== null && until > now;
  const ed25519 = client.signatureScheme === "ed25519" && client.signingKey !== null;
  const overlapping = running(client.previousSchemeExpiresAt);
  const hmac: KeySlot[] = [];
  if (!ed25519 || overlapping) hmac.push("webhookSecret");
  if (client.previousWebhookSecret && running(client.previousSecretExpiresAt)) hmac.push("previousWebhookSecret");
  const v1a: KeySlot[] = [];
  if (client.signingKey && (ed25519 || overlapping)) v1a.push("signingKey");
  if (client.previousSigningKey && running(client.previousSigningKeyExpiresAt)) v1a.push("previousSigningKey");
  return ed25519 ? [...v1a, ...hmac] : [...hmac, ...v1a];
}

/** The keys that sign a client's messages now (signingSlots), opened. */
export function activeSigningKeys(client: ClientRow, now: number, encryptionKey: Buffer | null = null): string[] {
  return signingSlots(client, now).map((slot) => openedKey(client[slot]!, encryptionKey));
}

/**
 * Sealed keys opened, per encryption key: a client's key signs every one of its messages, and
 * opening it (AES-GCM) once rather than once per message. Bounded: the last 1,000 keys used.
 */
const opened = new WeakMap<Buffer, LRUCache<string, string>>();

function openedKey(stored: string, encryptionKey: Buffer | null): string {
  if (encryptionKey === null || !isSealed(stored)) return openSecret(stored, encryptionKey);
  let keys = opened.get(encryptionKey);
  if (keys === undefined) {
    keys = new LRUCache<string, string>({ max: 1_000 });
    opened.set(encryptionKey, keys);
  }
  let key = keys.get(stored);
  if (key === undefined) {
    key = openSecret(stored, encryptionKey);
    keys.set(stored, key);
  }
  return key;
}

/** Whether the 24-hour overlap after a switch of signature scheme is still running. */
export function schemeOverlapping(client: ClientRow, now: number): boolean {
  return client.previousSchemeExpiresAt !== null && client.previousSchemeExpiresAt > now;
}

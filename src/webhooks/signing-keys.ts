import { openSecret } from "../crypto.js";
import type { ClientRow } from "../store/store.js";

/**
 * The keys that sign a client's messages now, by its scheme: the current one, plus the previous
 * during its grace period (`whsec_` secrets for hmac, `whsk_` signing keys for ed25519). For 24 hours
 * after a switch of scheme, the other scheme's current key signs too, after these (docs/contract.md,
 * "Switching the scheme").
 */
export function activeSigningKeys(client: ClientRow, now: number, encryptionKey: Buffer | null = null): string[] {
  const ed25519 = client.signatureScheme === "ed25519" && client.signingKey !== null;
  const keys = ed25519 ? activeEd25519Keys(client, now, encryptionKey) : activeSecrets(client, now, encryptionKey);
  if (!schemeOverlapping(client, now)) return keys;
  if (ed25519) return [...keys, openSecret(client.webhookSecret, encryptionKey)];
  return client.signingKey ? [...keys, openSecret(client.signingKey, encryptionKey)] : keys;
}

/** Whether the 24-hour overlap after a switch of signature scheme is still running. */
export function schemeOverlapping(client: ClientRow, now: number): boolean {
  return client.previousSchemeExpiresAt !== null && client.previousSchemeExpiresAt > now;
}

/** The `whsk_` keys of an ed25519 client: the current one, plus the previous during its grace period. */
function activeEd25519Keys(client: ClientRow, now: number, encryptionKey: Buffer | null): string[] {
  const keys = [openSecret(client.signingKey!, encryptionKey)];
  if (
    client.previousSigningKey &&
    client.previousSigningKeyExpiresAt !== null &&
    client.previousSigningKeyExpiresAt > now
  ) {
    keys.push(openSecret(client.previousSigningKey, encryptionKey));
  }
  return keys;
}

/** The secrets that sign a webhook now: the current one, plus the previous during its grace period. */
export function activeSecrets(client: ClientRow, now: number, encryptionKey: Buffer | null = null): string[] {
  const secrets = [openSecret(client.webhookSecret, encryptionKey)];
  if (client.previousWebhookSecret && client.previousSecretExpiresAt !== null && client.previousSecretExpiresAt > now) {
    secrets.push(openSecret(client.previousWebhookSecret, encryptionKey));
  }
  return secrets;
}

import { openSecret } from "../crypto.js";
import type { ClientRow } from "../store/store.js";

/**
 * The keys that sign a client's messages now, by its scheme: the current one, plus the previous
 * during its grace period (`whsec_` secrets for hmac, `whsk_` signing keys for ed25519).
 */
export function activeSigningKeys(client: ClientRow, now: number, encryptionKey: Buffer | null = null): string[] {
  if (client.signatureScheme !== "ed25519" || !client.signingKey) return activeSecrets(client, now, encryptionKey);
  const keys = [openSecret(client.signingKey, encryptionKey)];
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

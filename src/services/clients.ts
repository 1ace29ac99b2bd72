import type { Clock } from "../clock.js";
import { API_KEY_PREFIX, digestsEqual, encryptSecret, generateApiKey, hashApiKey } from "../crypto.js";
import { newId } from "../ids.js";
import type { Db } from "../db/open.js";
import { findClient, findClientByKeyHash, insertClient, listClients, updateClient, type ClientRow } from "../db/clients.js";
import { generateWebhookSecret } from "../webhooks/sign.js";

/** How long a rotated-out secret keeps signing beside the new one. */
export const SECRET_GRACE_MS = 24 * 60 * 60 * 1000;

export interface ClientLimits {
  maxWaiting?: number | null;
  maxRunning?: number | null;
  creditLimit?: number | null;
}

export interface CreatedClient {
  client: ClientRow;
  apiKey: string;
}

export function createClient(
  db: Db,
  clock: Clock,
  input: { name: string; upstreamKey?: string | null; encryptionKey?: Buffer | null } & ClientLimits,
): CreatedClient {
  const now = clock.now();
  const apiKey = generateApiKey();
  const id = newId("cli", now);
  let upstreamKeyEncrypted: string | null = null;
  if (input.upstreamKey) {
    if (!input.encryptionKey) throw new Error("RELAY_ENCRYPTION_KEY must be set to store a client's upstream key");
    upstreamKeyEncrypted = encryptSecret(input.upstreamKey, input.encryptionKey);
  }
  const client = insertClient(db, {
    id,
    name: input.name,
    apiKeyHash: hashApiKey(apiKey),
    apiKeyPrefix: apiKey.slice(0, API_KEY_PREFIX.length + 6),
    webhookSecret: generateWebhookSecret(),
    upstreamKeyEncrypted,
    upstreamAccount: upstreamKeyEncrypted ? id : "default",
    maxWaiting: input.maxWaiting ?? null,
    maxRunning: input.maxRunning ?? null,
    creditLimit: input.creditLimit ?? null,
    createdAt: now,
  });
  return { client, apiKey };
}

/**
 * Resolves a bearer key to its active client. The lookup is by SHA-256 digest (an index hit that
 * reveals nothing about the key), and the digests are then compared in constant time.
 */
export function authenticate(db: Db, apiKey: string): ClientRow | null {
  if (!apiKey.startsWith(API_KEY_PREFIX) || apiKey.length > 200) return null;
  const digest = hashApiKey(apiKey);
  const client = findClientByKeyHash(db, digest);
  if (!client || !digestsEqual(client.apiKeyHash, digest) || client.revokedAt !== null) return null;
  return client;
}

export function revokeClient(db: Db, clock: Clock, id: string): ClientRow | undefined {
  const client = findClient(db, id);
  if (!client) return undefined;
  if (client.revokedAt !== null) return client;
  return updateClient(db, id, { revokedAt: clock.now() });
}

/** A new secret; the old one keeps signing beside it for SECRET_GRACE_MS. Returns the new secret. */
export function rotateSecret(db: Db, clock: Clock, id: string): { client: ClientRow; secret: string; previousExpiresAt: number } | undefined {
  const client = findClient(db, id);
  if (!client) return undefined;
  const now = clock.now();
  const secret = generateWebhookSecret();
  const updated = updateClient(db, id, {
    webhookSecret: secret,
    previousWebhookSecret: client.webhookSecret,
    previousSecretExpiresAt: now + SECRET_GRACE_MS,
  })!;
  return { client: updated, secret, previousExpiresAt: now + SECRET_GRACE_MS };
}

/** The secrets that sign a webhook now: the current one, plus the previous during its grace period. */
export function activeSecrets(client: ClientRow, now: number): string[] {
  const secrets = [client.webhookSecret];
  if (client.previousWebhookSecret && client.previousSecretExpiresAt !== null && client.previousSecretExpiresAt > now) {
    secrets.push(client.previousWebhookSecret);
  }
  return secrets;
}

export function updateClientLimits(db: Db, id: string, limits: ClientLimits & { name?: string }): ClientRow | undefined {
  const patch: Partial<ClientRow> = {};
  if (limits.name !== undefined) patch.name = limits.name;
  if (limits.maxWaiting !== undefined) patch.maxWaiting = limits.maxWaiting;
  if (limits.maxRunning !== undefined) patch.maxRunning = limits.maxRunning;
  if (limits.creditLimit !== undefined) patch.creditLimit = limits.creditLimit;
  return updateClient(db, id, patch);
}

export { findClient, listClients };

import type { Clock } from "../clock.js";
import { API_KEY_PREFIX, decryptSecret, digestsEqual, encryptSecret, generateApiKey, hashApiKey } from "../crypto.js";
import { newId } from "../ids.js";
import type { Db } from "../db/open.js";
import { findClient, findClientByKeyHash, insertClient, listClients, updateClient, type ClientRow } from "../db/clients.js";
import { unsubmittedOfClient } from "../db/tasks.js";
import type { Lifecycle } from "../core/lifecycle.js";
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
  /** The plain `whsec_` secret (the row may hold it encrypted). */
  webhookSecret: string;
}

/** Webhook secrets at rest: AES-256-GCM under RELAY_ENCRYPTION_KEY when it is set, marked by this prefix. */
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

export function createClient(
  db: Db,
  clock: Clock,
  input: { name: string; upstreamKey?: string | null; encryptionKey?: Buffer | null } & ClientLimits,
): CreatedClient {
  const now = clock.now();
  const apiKey = generateApiKey();
  const webhookSecret = generateWebhookSecret();
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
    webhookSecret: sealSecret(webhookSecret, input.encryptionKey ?? null),
    upstreamKeyEncrypted,
    upstreamAccount: upstreamKeyEncrypted ? id : "default",
    maxWaiting: input.maxWaiting ?? null,
    maxRunning: input.maxRunning ?? null,
    creditLimit: input.creditLimit ?? null,
    createdAt: now,
  });
  return { client, apiKey, webhookSecret };
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

/**
 * Revokes a client's API key and stops its spending, in one transaction: its tasks not yet offered
 * upstream end canceled (never charged, with their task.canceled events). A task being submitted
 * right now is caught by the submitter, which checks revocation before the upstream call.
 */
export function revokeClient(deps: { db: Db; clock: Clock; lifecycle: Lifecycle }, id: string): { client: ClientRow; canceled: number } | undefined {
  const { db, clock, lifecycle } = deps;
  return db.transaction((tx) => {
    const client = findClient(tx, id);
    if (!client) return undefined;
    const now = clock.now();
    const revoked = client.revokedAt !== null ? client : updateClient(tx, id, { revokedAt: now })!;
    let canceled = 0;
    for (const task of unsubmittedOfClient(tx, id, now)) {
      const error = { code: "client_revoked", message: "The API key that created this task was revoked before it was submitted; it was never charged.", request_id: null };
      if (lifecycle.cancel(task, null, error, tx)) canceled += 1;
    }
    return { client: revoked, canceled };
  });
}

/** A new secret; the old one keeps signing beside it for SECRET_GRACE_MS. Returns the new secret. */
export function rotateSecret(
  db: Db,
  clock: Clock,
  id: string,
  encryptionKey: Buffer | null = null,
): { client: ClientRow; secret: string; previousExpiresAt: number } | undefined {
  return db.transaction((tx) => {
    const client = findClient(tx, id);
    if (!client) return undefined;
    const now = clock.now();
    const secret = generateWebhookSecret();
    const updated = updateClient(tx, id, {
      webhookSecret: sealSecret(secret, encryptionKey),
      previousWebhookSecret: client.webhookSecret,
      previousSecretExpiresAt: now + SECRET_GRACE_MS,
    })!;
    return { client: updated, secret, previousExpiresAt: now + SECRET_GRACE_MS };
  });
}

/** The secrets that sign a webhook now: the current one, plus the previous during its grace period. */
export function activeSecrets(client: ClientRow, now: number, encryptionKey: Buffer | null = null): string[] {
  const secrets = [openSecret(client.webhookSecret, encryptionKey)];
  if (client.previousWebhookSecret && client.previousSecretExpiresAt !== null && client.previousSecretExpiresAt > now) {
    secrets.push(openSecret(client.previousWebhookSecret, encryptionKey));
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

/** With RELAY_ENCRYPTION_KEY set, seals webhook secrets still stored in plain text (from before the key). */
export function sealPlainSecrets(db: Db, key: Buffer | null): number {
  if (!key) return 0;
  let sealed = 0;
  for (const c of listClients(db)) {
    const patch: Partial<ClientRow> = {};
    if (!isSealed(c.webhookSecret)) patch.webhookSecret = sealSecret(c.webhookSecret, key);
    if (c.previousWebhookSecret && !isSealed(c.previousWebhookSecret)) patch.previousWebhookSecret = sealSecret(c.previousWebhookSecret, key);
    if (Object.keys(patch).length > 0) {
      updateClient(db, c.id, patch);
      sealed += 1;
    }
  }
  return sealed;
}

export { findClient, listClients };

import {
  API_KEY_PREFIX,
  digestsEqual,
  encryptSecret,
  generateApiKey,
  hashApiKey,
  isSealed,
  sealSecret,
} from "../crypto.js";
import { newId } from "../ids.js";
import type { ClientRow, NewClientRow, TaskRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { generateWebhookSecret } from "../webhooks/sign.js";
import { LRUCache } from "lru-cache";

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

export interface NewClient {
  row: NewClientRow & { id: string };
  apiKey: string;
  webhookSecret: string;
}

/** A new client's row, API key and webhook secret (only the key's digest and the sealed secret are stored). */
export function newClient(
  now: number,
  input: { name: string; upstreamKey?: string | null; encryptionKey?: Buffer | null } & ClientLimits,
): NewClient {
  const apiKey = generateApiKey();
  const webhookSecret = generateWebhookSecret();
  const id = newId("cli", now);
  let upstreamKeyEncrypted: string | null = null;
  if (input.upstreamKey) {
    if (!input.encryptionKey) throw new Error("RELAY_ENCRYPTION_KEY must be set to store a client's upstream key");
    upstreamKeyEncrypted = encryptSecret(input.upstreamKey, input.encryptionKey);
  }
  const row = {
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
  };
  return { row, apiKey, webhookSecret };
}

export async function createClient(
  deps: Pick<ServiceDeps, "store" | "clock">,
  input: { name: string; upstreamKey?: string | null; encryptionKey?: Buffer | null } & ClientLimits,
): Promise<CreatedClient> {
  const { row, apiKey, webhookSecret } = newClient(deps.clock.now(), input);
  return { client: await deps.store.clients.insert(row), apiKey, webhookSecret };
}

/**
 * Resolves a bearer key to its active client. The lookup is by SHA-256 digest (an index hit that
 * reveals nothing about the key), and the digests are then compared in constant time.
 */
export async function authenticate(deps: Pick<ServiceDeps, "store">, apiKey: string): Promise<ClientRow | null> {
  if (!apiKey.startsWith(API_KEY_PREFIX) || apiKey.length > 200) return null;
  return findActive(deps, hashApiKey(apiKey));
}

/**
 * How long an authenticated key is kept at most before its client row is read again. Changes are
 * seen sooner: at once when made through this process's store or, on SQLite, by another process
 * (the CLI: ClientStore.pollChanges), and at the next notification when another instance made them
 * on PostgreSQL; this bounds a change made while an instance's listener was reconnecting
 * (docs/contract.md, "Authentication").
 */
export const API_KEY_CACHE_MS = 5_000;
/** Keys kept at most; past it the oldest entry goes. */
export const API_KEY_CACHE_SIZE = 10_000;

/**
 * The active clients of the keys this process authenticated recently, keyed by the key's SHA-256
 * digest (never the key), so a request with a cached key reads no client row. Entries go when the
 * store reports their client changed (ClientStore.watch: a revocation, a rotation, new limits or
 * settings; on SQLite also any commit of another process), when API_KEY_CACHE_MS has passed, or
 * when the map is full (the least recently used). Unknown and
 * revoked keys are never kept: each is looked up again.
 */
export class ApiKeyCache {
  private readonly entries: LRUCache<string, { client: ClientRow; until: number }>;
  /** Bumped by every change: a lookup that started before a change must not store what it read. */
  private generation = 0;
  readonly stop: () => void;

  constructor(
    private readonly deps: Pick<ServiceDeps, "store" | "clock">,
    private readonly opts: { ttlMs?: number; size?: number } = {},
  ) {
    this.entries = new LRUCache({ max: opts.size ?? API_KEY_CACHE_SIZE });
    this.stop = deps.store.clients.watch((clientId) => this.forget(clientId));
  }

  get size(): number {
    return this.entries.size;
  }

  /** As authenticate(), from the cache when the key was authenticated within the bound. */
  async authenticate(apiKey: string): Promise<ClientRow | null> {
    if (!apiKey.startsWith(API_KEY_PREFIX) || apiKey.length > 200) return null;
    const digest = hashApiKey(apiKey);
    const now = this.deps.clock.now();
    this.deps.store.clients.pollChanges();
    const hit = this.entries.get(digest);
    if (hit && hit.until > now && digestsEqual(hit.client.apiKeyHash, digest)) return hit.client;
    if (hit) this.entries.delete(digest);
    const generation = this.generation;
    const client = await findActive(this.deps, digest);
    if (client && generation === this.generation) {
      this.entries.set(digest, { client, until: now + (this.opts.ttlMs ?? API_KEY_CACHE_MS) });
    }
    return client;
  }

  /** The client's entries go (all of them for `null`); lookups in flight do not store what they read. */
  forget(clientId: string | null): void {
    this.generation++;
    if (clientId === null) {
      this.entries.clear();
      return;
    }
    const gone = [...this.entries.entries()].filter(([, entry]) => entry.client.id === clientId);
    for (const [digest] of gone) this.entries.delete(digest);
  }
}

async function findActive(deps: Pick<ServiceDeps, "store">, digest: string): Promise<ClientRow | null> {
  const client = await deps.store.clients.findByKeyHash(digest);
  if (!client || !digestsEqual(client.apiKeyHash, digest) || client.revokedAt !== null) return null;
  return client;
}

/**
 * Revokes a client's API key and stops its spending: once revoked, its tasks not yet offered
 * upstream end canceled (never charged, with their task.canceled events). A task being submitted
 * right now is caught by the submitter, which checks revocation in the transaction that begins the
 * submission, so no task of a revoked client is offered upstream after this returns.
 */
export async function revokeClient(
  deps: Pick<ServiceDeps, "store" | "clock" | "lifecycle">,
  id: string,
): Promise<{ client: ClientRow; canceled: number } | undefined> {
  const { store, clock, lifecycle } = deps;
  const now = clock.now();
  const revoked = await store.clients.updateWith(id, (client) => ({
    patch: client.revokedAt !== null ? {} : { revokedAt: now },
    result: null,
  }));
  if (!revoked) return undefined;
  let canceled = 0;
  const error = {
    code: "client_revoked",
    message: "The API key that created this task was revoked before it was submitted; it was never charged.",
    request_id: null,
  };
  for (const task of await store.tasks.unsubmittedOfClient(id, now)) {
    // Guarded like an API cancel: a task the submitter claimed meanwhile is left to its revocation check.
    const unsubmitted = (current: TaskRow, at: number) =>
      current.phase === "waiting" &&
      current.submitAttempts === 0 &&
      !(current.claimedUntil !== null && current.claimedUntil >= at);
    if ((await lifecycle.cancelIf(task.id, null, unsubmitted, error))?.status === "canceled") canceled += 1;
  }
  return { client: revoked.client, canceled };
}

/** A new secret; the old one keeps signing beside it for SECRET_GRACE_MS. Returns the new secret. */
export async function rotateSecret(
  deps: Pick<ServiceDeps, "store" | "clock">,
  id: string,
  encryptionKey: Buffer | null = null,
): Promise<{ client: ClientRow; secret: string; previousExpiresAt: number } | undefined> {
  const now = deps.clock.now();
  const secret = generateWebhookSecret();
  const rotated = await deps.store.clients.updateWith(id, (client) => ({
    patch: {
      webhookSecret: sealSecret(secret, encryptionKey),
      previousWebhookSecret: client.webhookSecret,
      previousSecretExpiresAt: now + SECRET_GRACE_MS,
    },
    result: null,
  }));
  return rotated ? { client: rotated.client, secret, previousExpiresAt: now + SECRET_GRACE_MS } : undefined;
}

export function updateClientLimits(
  deps: Pick<ServiceDeps, "store">,
  id: string,
  limits: ClientLimits & { name?: string },
): Promise<ClientRow | undefined> {
  const patch: Partial<ClientRow> = {};
  if (limits.name !== undefined) patch.name = limits.name;
  if (limits.maxWaiting !== undefined) patch.maxWaiting = limits.maxWaiting;
  if (limits.maxRunning !== undefined) patch.maxRunning = limits.maxRunning;
  if (limits.creditLimit !== undefined) patch.creditLimit = limits.creditLimit;
  return deps.store.clients.update(id, patch);
}

/** With RELAY_ENCRYPTION_KEY set, seals webhook secrets still stored in plain text (from before the key). */
export async function sealPlainSecrets(deps: Pick<ServiceDeps, "store">, key: Buffer | null): Promise<number> {
  if (!key) return 0;
  let sealed = 0;
  for (const c of await deps.store.clients.list()) {
    const patch: Partial<ClientRow> = {};
    if (!isSealed(c.webhookSecret)) patch.webhookSecret = sealSecret(c.webhookSecret, key);
    if (c.previousWebhookSecret && !isSealed(c.previousWebhookSecret))
      patch.previousWebhookSecret = sealSecret(c.previousWebhookSecret, key);
    if (c.signingKey && !isSealed(c.signingKey)) patch.signingKey = sealSecret(c.signingKey, key);
    if (c.previousSigningKey && !isSealed(c.previousSigningKey))
      patch.previousSigningKey = sealSecret(c.previousSigningKey, key);
    if (c.callbackHeaders && !isSealed(c.callbackHeaders)) patch.callbackHeaders = sealSecret(c.callbackHeaders, key);
    if (Object.keys(patch).length > 0) {
      await deps.store.clients.update(c.id, patch);
      sealed += 1;
    }
  }
  return sealed;
}

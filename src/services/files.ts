import { LRUCache } from "lru-cache";
import type { Bucket } from "../mirror/bucket.js";
import { LINK_URL_EXPIRES_IN } from "../mirror/links.js";
import { Presigners } from "../mirror/presigners.js";
import { openLinkKey } from "../mirror/stored-bucket.js";
import type { ClientRow } from "../store/store.js";
import type { ServiceDeps } from "./deps.js";

/**
 * A cached redirect is given while at least this much of its URL's life is left, so a reader that
 * follows it at once, or a few minutes late, still finds it valid: a URL made for 15 minutes is
 * reused for its first 5, then made anew.
 */
export const LINK_URL_MIN_LEFT_MS = 10 * 60_000;

/** What a file link needs of its client: the bucket setting (as stored) and its link key, opened. */
export interface LinkClient {
  client: ClientRow;
  setting: string;
  /** The link key, opened; null when the relay cannot open it (sealed under another key). */
  linkKey: string | null;
}

/** The client as a file link sees it, or null: unknown, revoked, or without a bucket (no link of it works). */
export async function linkClientOf(
  deps: Pick<ServiceDeps, "store" | "config">,
  clientId: string,
): Promise<LinkClient | null> {
  const client = await deps.store.clients.find(clientId);
  if (!client || client.revokedAt !== null || client.storageConfig === null) return null;
  let linkKey: string | null;
  try {
    linkKey = openLinkKey(client, deps.config.encryptionKey);
  } catch {
    // Sealed under a key the relay no longer has: nothing this link can open.
    linkKey = null;
  }
  return { client, setting: client.storageConfig, linkKey };
}

/**
 * What makes GET /files/{token} cheap (issue #43: 1.23 ms of CPU per redirect, a full task row, the
 * link key decrypted and a presign on every request):
 * - the client's link key, opened once and kept until the store reports the client changed
 *   (ClientStore.watch: a revocation, a bucket removed or replaced, on this instance or, on
 *   PostgreSQL, another; on SQLite also the CLI's commits, seen by pollChanges);
 * - the presigned URL per copy, kept with the bucket handle it was made with (a changed setting is a
 *   new handle, so an old URL is never found) and given only while LINK_URL_MIN_LEFT_MS of its life
 *   is left, so none is ever served past its expiry;
 * - one bucket handle per client (Presigners).
 * The task is still read on every request, two columns of it (TaskStore.filesOf), so a pruned task
 * ends its links at once, on every instance.
 */
export class FileLinkCache {
  readonly presigners: Presigners;
  private readonly clients: LRUCache<string, LinkClient | false>;
  private readonly urls: LRUCache<string, { bucket: Bucket; url: string; until: number }>;
  /** Bumped by every change: a lookup that started before a change must not store what it read. */
  private generation = 0;
  readonly stop: () => void;

  constructor(
    private readonly deps: Pick<ServiceDeps, "store" | "config">,
    size = 10_000,
  ) {
    this.presigners = new Presigners({ allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks });
    this.clients = new LRUCache({ max: size });
    this.urls = new LRUCache({ max: size });
    this.stop = deps.store.clients.watch((clientId) => this.forget(clientId));
  }

  /** The client as linkClientOf reads it, from the cache while the store reports no change of it. */
  async client(clientId: string): Promise<LinkClient | null> {
    this.deps.store.clients.pollChanges();
    const hit = this.clients.get(clientId);
    if (hit !== undefined) return hit || null;
    const generation = this.generation;
    const found = await linkClientOf(this.deps, clientId);
    if (generation === this.generation) this.clients.set(clientId, found ?? false);
    return found;
  }

  /** A URL of `key` made by `bucket` with enough life left at `now`, or undefined. */
  url(bucket: Bucket, key: string, now: number): string | undefined {
    const hit = this.urls.get(key);
    return hit && hit.bucket === bucket && hit.until > now ? hit.url : undefined;
  }

  /** Keeps a URL of `key` that `bucket` signed at `signedAt` for LINK_URL_EXPIRES_IN. */
  keep(bucket: Bucket, key: string, url: string, signedAt: number): void {
    this.urls.set(key, { bucket, url, until: signedAt + LINK_URL_EXPIRES_IN * 1000 - LINK_URL_MIN_LEFT_MS });
  }

  /** The client's entry goes (every client's for null); its URLs go with its bucket handle. */
  forget(clientId: string | null): void {
    this.generation++;
    if (clientId === null) this.clients.clear();
    else this.clients.delete(clientId);
  }

  close(): void {
    this.stop();
    this.presigners.close();
  }
}

import { LRUCache } from "lru-cache";
import type { Bucket } from "../mirror/bucket.js";
import { LINK_URL_EXPIRES_IN } from "../mirror/links.js";
import { Presigners } from "../mirror/presigners.js";
import { openLinkKey } from "../mirror/stored-bucket.js";
import type { ClientRow } from "../store/rows.js";
import { ClientRows } from "./client-rows.js";
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
  return client ? linkClientFrom(client, deps.config.encryptionKey) : null;
}

/** linkClientOf for a client row already read: its link key opened (decrypted). */
export function linkClientFrom(client: ClientRow, encryptionKey: Buffer | null): LinkClient | null {
  if (client.revokedAt !== null || client.storageConfig === null) return null;
  let linkKey: string | null;
  try {
    linkKey = openLinkKey(client, encryptionKey);
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
  readonly rows: ClientRows;
  /** The link key opened once per row read: a changed client is a new row, so it is opened again. */
  private readonly linked = new WeakMap<ClientRow, LinkClient | null>();
  private readonly urls: LRUCache<string, { bucket: Bucket; url: string; until: number }>;

  constructor(
    private readonly deps: Pick<ServiceDeps, "store" | "config">,
    size = 10_000,
    rows?: ClientRows,
  ) {
    this.presigners = new Presigners({ allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks });
    this.rows = rows ?? new ClientRows(deps, size);
    this.urls = new LRUCache({ max: size });
  }

  /** The client as linkClientOf reads it, from the cache while the store reports no change of it. */
  async client(clientId: string): Promise<LinkClient | null> {
    const row = await this.rows.find(clientId);
    if (!row) return null;
    if (!this.linked.has(row)) this.linked.set(row, linkClientFrom(row, this.deps.config.encryptionKey));
    return this.linked.get(row)!;
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

  close(): void {
    this.rows.stop();
    this.presigners.close();
  }
}

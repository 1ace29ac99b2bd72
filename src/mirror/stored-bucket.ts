import { openSecret, sealSecret } from "../crypto.js";
import type { Store } from "../store/store.js";
import type { ClientRow } from "../store/rows.js";
import type { BucketConfig } from "./bucket.js";
import { newLinkKey } from "./links.js";

/**
 * A client's bucket as clients.storage_config stores it (JSON, the secret access key sealed), read
 * here for the mirror; setting and showing it is services/storage.ts.
 */

/** What GET shows: everything but the secret. */
export interface StorageView {
  endpoint: string;
  bucket: string;
  region: string;
  prefix: string;
  access_key_id: string;
  force_path_style: boolean;
  public_base_url: string | null;
  url_expires_in: number;
}

export interface StoredBucket extends StorageView {
  /** Sealed (enc:v1:…). */
  secret_access_key: string;
  /**
   * Sealed: the key of this bucket's file links (mirror/links.ts). Kept while the same bucket stays
   * set, new when another is set; absent in settings stored before links existed (the mirror adds it).
   */
  link_key?: string;
}

export function readStored(text: string | null): StoredBucket | null {
  if (!text) return null;
  try {
    return JSON.parse(text) as StoredBucket;
  } catch {
    return null;
  }
}

/** The client's bucket, opened for the mirror (the secret in memory only); null when none is set. */
export function openStorage(client: Pick<ClientRow, "storageConfig">, key: Buffer | null): BucketConfig | null {
  const stored = readStored(client.storageConfig);
  if (!stored) return null;
  return {
    endpoint: stored.endpoint,
    bucket: stored.bucket,
    region: stored.region,
    prefix: stored.prefix,
    accessKeyId: stored.access_key_id,
    secretAccessKey: openSecret(stored.secret_access_key, key),
    forcePathStyle: stored.force_path_style,
    publicBaseUrl: stored.public_base_url,
    urlExpiresIn: stored.url_expires_in,
  };
}

/** The key of the client's file links, opened; null when no bucket is set (or it has none yet). */
export function openLinkKey(client: Pick<ClientRow, "storageConfig">, key: Buffer | null): string | null {
  const stored = readStored(client.storageConfig);
  return stored?.link_key ? openSecret(stored.link_key, key) : null;
}

/** The link key a new setting keeps: the previous one while the same bucket stays set, else a new one (sealed). */
export function linkKeyFor(
  previous: StoredBucket | null,
  next: Pick<StoredBucket, "endpoint" | "bucket">,
  key: Buffer,
): string {
  const same = previous?.link_key && previous.endpoint === next.endpoint && previous.bucket === next.bucket;
  return same ? previous.link_key! : sealSecret(newLinkKey(), key);
}

/**
 * The client's link key, added to its bucket setting when it has none (set before links existed),
 * in one read-modify-write of the client row; null when no bucket is set or no RELAY_ENCRYPTION_KEY.
 */
export async function ensureLinkKey(
  store: Pick<Store, "clients">,
  clientId: string,
  key: Buffer | null,
): Promise<string | null> {
  if (!key) return null;
  const changed = await store.clients.updateWith(clientId, (client) => {
    const stored = readStored(client.storageConfig);
    if (!stored || stored.link_key) return { patch: {}, result: stored?.link_key ?? null };
    const linkKey = sealSecret(newLinkKey(), key);
    return { patch: { storageConfig: JSON.stringify({ ...stored, link_key: linkKey }) }, result: linkKey };
  });
  const sealed = changed?.result ?? null;
  return sealed === null ? null : openSecret(sealed, key);
}

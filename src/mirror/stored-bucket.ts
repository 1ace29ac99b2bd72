import { openSecret } from "../crypto.js";
import type { ClientRow } from "../store/store.js";
import type { BucketConfig } from "./bucket.js";

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

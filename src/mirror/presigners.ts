import { Bucket, type BucketConfig, type BucketOptions } from "./bucket.js";

/**
 * Open bucket handles for presigning, kept per client while its bucket setting stays the same
 * (matched by the stored setting's text): making an S3 client costs about 1.4 ms of CPU, a
 * presign about 0.2 ms, and a file link presigns on every request. Presigning opens no socket;
 * a handle dropped (setting changed, or the least recently used past `max`) is closed.
 */
export class Presigners {
  private readonly open = new Map<string, { setting: string; bucket: Bucket }>();

  constructor(
    private readonly options: BucketOptions,
    private readonly max = 256,
  ) {}

  /** The client's handle for this setting; `config` opens it when there is none yet (throws as `new Bucket` does). */
  get(clientId: string, setting: string, config: () => BucketConfig): Bucket {
    const held = this.open.get(clientId);
    if (held && held.setting === setting) {
      // Most recently used last.
      this.open.delete(clientId);
      this.open.set(clientId, held);
      return held.bucket;
    }
    if (held) {
      this.open.delete(clientId);
      held.bucket.close();
    }
    const bucket = new Bucket(config(), this.options);
    this.open.set(clientId, { setting, bucket });
    while (this.open.size > this.max) {
      const [oldest, entry] = this.open.entries().next().value!;
      this.open.delete(oldest);
      entry.bucket.close();
    }
    return bucket;
  }

  get size(): number {
    return this.open.size;
  }

  close(): void {
    for (const { bucket } of this.open.values()) bucket.close();
    this.open.clear();
  }
}

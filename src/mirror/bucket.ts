import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import type { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { createGuardedLookup, validateCallbackUrl, type Resolver } from "../webhooks/ssrf.js";

/** A client's bucket, opened (the secret in plain text: only ever in memory). */
export interface BucketConfig {
  endpoint: string;
  bucket: string;
  region: string;
  prefix: string;
  accessKeyId: string;
  secretAccessKey: string;
  forcePathStyle: boolean;
  publicBaseUrl: string | null;
  /** Lifetime of a presigned GET, seconds (at most 7 days, SigV4's limit). */
  urlExpiresIn: number;
}

export const MAX_URL_EXPIRES_IN = 7 * 24 * 60 * 60;

/** Each part of a multipart upload; memory per copy is about PART_SIZE × QUEUE_SIZE. */
export const PART_SIZE = 8 * 1024 * 1024;
export const QUEUE_SIZE = 2;
/** S3's limit for one PutObject; a longer file with a known length still goes multipart. */
const MAX_PUT_BYTES = 5 * 1024 ** 3;

export interface BucketOptions {
  allowPrivateNetworks: boolean;
  resolve?: Resolver;
  /** Longest wait for one request to the bucket to answer or make progress. */
  requestTimeoutMs?: number;
}

/**
 * A bucket handle: an S3 client whose sockets connect only to addresses the SSRF guard allows
 * (the endpoint is the caller's choice, like a callback URL), checked again on every open in case
 * the relay's configuration changed since the bucket was set.
 */
export class Bucket {
  readonly client: S3Client;
  private readonly agents: Array<HttpAgent | HttpsAgent>;

  constructor(
    readonly config: BucketConfig,
    opts: BucketOptions,
  ) {
    const checked = validateCallbackUrl(config.endpoint, { allowPrivateNetworks: opts.allowPrivateNetworks });
    if (!checked.ok) throw new BucketError(`bucket endpoint refused: ${checked.reason}`, false);
    const lookup = createGuardedLookup({ allowPrivateNetworks: opts.allowPrivateNetworks, ...(opts.resolve ? { resolve: opts.resolve } : {}) });
    const httpAgent = new HttpAgent({ keepAlive: true, maxSockets: 8, lookup });
    const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 8, lookup });
    this.agents = [httpAgent, httpsAgent];
    this.client = new S3Client({
      endpoint: config.endpoint,
      region: config.region,
      forcePathStyle: config.forcePathStyle,
      credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey },
      // Checksums only where S3 demands them: the default (aws-chunked framing on streamed bodies)
      // is not understood by every S3-compatible server (s3rver stores the framing in the object).
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      // Retries are the mirror's own (with backoff across ticks); one SDK retry covers a dropped keep-alive socket.
      maxAttempts: 2,
      requestHandler: { httpAgent, httpsAgent, connectionTimeout: 10_000, requestTimeout: opts.requestTimeoutMs ?? 60_000 },
    });
  }

  /**
   * Streams `body` into `key`. With a known length (the source said it), one PutObject streams it
   * straight through; without, a multipart upload (parts of PART_SIZE, QUEUE_SIZE in flight). Memory
   * stays bounded whatever the file's size. A body that errors (too large, the source stalled)
   * aborts the upload, and no object is left.
   */
  async upload(key: string, body: Readable, contentType: string, signal: AbortSignal, contentLength: number | null = null): Promise<void> {
    const abortController = new AbortController();
    const abort = () => abortController.abort();
    signal.addEventListener("abort", abort, { once: true });
    if (contentLength !== null && contentLength <= MAX_PUT_BYTES) {
      body.once("error", abort);
      try {
        await this.client.send(new PutObjectCommand({ Bucket: this.config.bucket, Key: key, Body: body, ContentType: contentType, ContentLength: contentLength }), {
          abortSignal: abortController.signal,
        });
        return;
      } catch (err) {
        throw describeBucketError(err);
      } finally {
        signal.removeEventListener("abort", abort);
      }
    }
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.config.bucket, Key: key, Body: body, ContentType: contentType },
      partSize: PART_SIZE,
      queueSize: QUEUE_SIZE,
      leavePartsOnError: false,
      abortController,
    });
    body.once("error", abort);
    try {
      await upload.done();
    } catch (err) {
      throw describeBucketError(err);
    } finally {
      signal.removeEventListener("abort", abort);
    }
  }

  /** Where the caller fetches the copy: public_base_url + key, or a presigned GET valid url_expires_in seconds. */
  async urlOf(key: string): Promise<string> {
    const { publicBaseUrl, bucket, urlExpiresIn } = this.config;
    if (publicBaseUrl) return `${publicBaseUrl.replace(/\/+$/, "")}/${key.split("/").map(encodeURIComponent).join("/")}`;
    return getSignedUrl(this.client, new GetObjectCommand({ Bucket: bucket, Key: key }), { expiresIn: Math.min(urlExpiresIn, MAX_URL_EXPIRES_IN) });
  }

  /** Reads a copy back (the dashboard shows it from the relay's own origin). */
  async open(key: string): Promise<{ body: Readable; contentLength: number | null }> {
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.config.bucket, Key: key }));
      return { body: res.Body as Readable, contentLength: res.ContentLength ?? null };
    } catch (err) {
      throw describeBucketError(err);
    }
  }

  close(): void {
    this.client.destroy();
    for (const agent of this.agents) agent.destroy();
  }
}

/** A failure talking to the bucket; `retryable` when trying again later may succeed. */
export class BucketError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = "BucketError";
  }
}

const KNOWN: Record<string, string> = {
  NoSuchBucket: "the bucket does not exist (NoSuchBucket)",
  AccessDenied: "access denied by the bucket (AccessDenied): check the key's permissions",
  InvalidAccessKeyId: "wrong credentials: the bucket does not know this access key id (InvalidAccessKeyId)",
  SignatureDoesNotMatch: "wrong credentials: the secret access key does not match (SignatureDoesNotMatch)",
};

/** A bucket's answer in words a caller can act on (never a credential). */
export function describeBucketError(err: unknown): Error {
  if (err instanceof BucketError) return err;
  const e = err as { name?: string; message?: string; code?: string; $metadata?: { httpStatusCode?: number } };
  if (e?.name === "AbortError") return new BucketError("upload aborted", true);
  const status = e?.$metadata?.httpStatusCode;
  const name = e?.name ?? "Error";
  const known = KNOWN[name];
  if (known) return new BucketError(`bucket: ${known}`, true);
  if (e?.code && /^E[A-Z]+$/.test(e.code)) return new BucketError(`bucket unreachable: ${e.code === "EBLOCKED" ? e.message : e.code}`, true);
  const detail = (e?.message ?? "").replace(/\s+/g, " ").slice(0, 200);
  return new BucketError(`bucket answered ${status ? `HTTP ${status} ` : ""}${name}${detail && detail !== name ? `: ${detail}` : ""}`, true);
}

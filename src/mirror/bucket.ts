import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import { pipeline, type Readable } from "node:stream";
import type { S3ClientConfig } from "@aws-sdk/client-s3";
import {
  deadlineIn,
  raceSignal,
  RateGuard,
  startDeadline,
  type Deadline,
  type MinRate,
  type Timers,
} from "../net/deadline.js";
import { lazy } from "../lazy.js";
import { createGuardedLookup, validateCallbackUrl, type Resolver } from "../net/address-guard.js";

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
  /** Each one defaults to BUCKET_DEADLINES'. */
  deadlines?: Partial<BucketDeadlines>;
  timers?: Timers;
}

export interface BucketDeadlines {
  /** To connect (the SDK's connectionTimeout). */
  connectTimeoutMs: number;
  /** A socket silent this long, no byte either way, ends its request (the SDK's socketTimeout). */
  idleTimeoutMs: number;
  /**
   * One request to its answer (the SDK's requestTimeout, thrown): every request but a streamed
   * PutObject, whose answer comes only after the whole file. A part of PART_SIZE goes within it.
   */
  requestTimeoutMs: number;
  /** A whole upload (PutObject or multipart), and a whole read of a copy with its body. */
  totalTimeoutMs: number;
  /** A read's answer (its headers, the SDK's retry included): someone waits for the preview. */
  answerTimeoutMs: number;
  /** Slowest a streamed body may move: taken by the bucket (an upload), or sent by it (a read). */
  minRate: MinRate;
}

/**
 * The bucket's deadlines (docs/decisions/0009-deadlines.md). A file of MIRROR_MAX_BYTES fits in
 * 30 minutes at 600 KB/s; a part of 8 MiB in 2 minutes at 70 KB/s; a bucket silent for 30 s, or
 * moving less than 32 KiB in 30 s while the other side waits, is given up on; a preview's answer
 * comes within 15 s.
 */
export const BUCKET_DEADLINES: BucketDeadlines = {
  connectTimeoutMs: 10_000,
  idleTimeoutMs: 30_000,
  requestTimeoutMs: 120_000,
  totalTimeoutMs: 30 * 60_000,
  answerTimeoutMs: 15_000,
  minRate: { bytes: 32 * 1024, windowMs: 30_000 },
};

/**
 * A bucket handle: an S3 client whose sockets connect only to addresses the SSRF guard allows
 * (the endpoint is the caller's choice, like a callback URL), checked again on every open in case
 * the relay's configuration changed since the bucket was set.
 */
/** A logger for the AWS SDK that says nothing: see the S3Client's construction below. */
const QUIET_SDK_LOGGER = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/**
 * The AWS SDK's S3 client, uploads and presigner: about a third of a second of CPU to load, so
 * loaded at a bucket's first use, not by every relay's start (src/lazy.ts).
 */
const s3Sdk = lazy(async () => {
  const [s3, storage, presigner] = await Promise.all([
    import("@aws-sdk/client-s3"),
    import("@aws-sdk/lib-storage"),
    import("@aws-sdk/s3-request-presigner"),
  ]);
  return { ...s3, Upload: storage.Upload, getSignedUrl: presigner.getSignedUrl };
});

export class Bucket {
  /** The S3 client, made at the first request (the SDK is loaded then). */
  private readonly s3 = lazy(async () => {
    const sdk = await s3Sdk.get();
    return { sdk, client: new sdk.S3Client(this.clientConfig) };
  });
  private readonly clientConfig: S3ClientConfig;
  readonly deadlines: BucketDeadlines;
  private readonly agents: Array<HttpAgent | HttpsAgent>;
  private readonly timers: { timers?: Timers };

  constructor(
    readonly config: BucketConfig,
    opts: BucketOptions,
  ) {
    const checked = validateCallbackUrl(config.endpoint, { allowPrivateNetworks: opts.allowPrivateNetworks });
    if (!checked.ok) throw new BucketError(`bucket endpoint refused: ${checked.reason}`, false);
    const lookup = createGuardedLookup({
      allowPrivateNetworks: opts.allowPrivateNetworks,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
    });
    const httpAgent = new HttpAgent({ keepAlive: true, maxSockets: 8, lookup });
    const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 8, lookup });
    this.agents = [httpAgent, httpsAgent];
    this.deadlines = { ...BUCKET_DEADLINES, ...opts.deadlines };
    this.timers = opts.timers ? { timers: opts.timers } : {};
    const { connectTimeoutMs, idleTimeoutMs, requestTimeoutMs } = this.deadlines;
    this.clientConfig = {
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
      // The mirror records every failed copy itself (files[i].error and its own log line, with the
      // task); the SDK's console.warn for a failed streamed upload would only repeat it, untagged.
      logger: QUIET_SDK_LOGGER,
      // Without throwOnRequestTimeout a passed requestTimeout is only a logged warning, and a bucket
      // that never answers holds its copy for good. Each command also carries a total deadline.
      requestHandler: {
        httpAgent,
        httpsAgent,
        connectionTimeout: connectTimeoutMs,
        requestTimeout: requestTimeoutMs,
        throwOnRequestTimeout: true,
        socketTimeout: idleTimeoutMs,
      },
    };
  }

  /**
   * Streams `body` into `key`. With a known length (the source said it), one PutObject streams it
   * straight through; without, a multipart upload (parts of PART_SIZE, QUEUE_SIZE in flight). Memory
   * stays bounded whatever the file's size. A body that errors (too large, the source stalled)
   * aborts the upload, and no object is left. The whole upload has totalTimeoutMs; a PutObject's
   * body must be taken at minRate while it waits for the bucket, and each multipart request
   * answered within requestTimeoutMs.
   */
  async upload(
    key: string,
    body: Readable,
    contentType: string,
    signal: AbortSignal,
    contentLength: number | null = null,
  ): Promise<void> {
    const deadline = this.deadline("the bucket's upload", signal);
    const abortController = new AbortController();
    const abort = () => abortController.abort(deadline.signal.reason);
    deadline.signal.addEventListener("abort", abort, { once: true });
    body.once("error", abort);
    let taken: RateGuard | null = null;
    try {
      const { sdk, client } = await this.s3.get();
      if (contentLength !== null && contentLength <= MAX_PUT_BYTES) {
        // The answer comes after the last byte: the request lasts as long as the upload may.
        taken = new RateGuard(this.deadlines.minRate, {
          what: "the bucket",
          blame: "reader",
          onSlow: (err) => deadline.abort(err),
          ...this.timers,
        });
        // pipe, not pipeline: the bucket's failure is the upload's (through onSlow), never passed
        // back to the source as its own.
        taken.on("error", () => {});
        body.pipe(taken);
        await client.send(
          new sdk.PutObjectCommand({
            Bucket: this.config.bucket,
            Key: key,
            Body: taken,
            ContentType: contentType,
            ContentLength: contentLength,
          }),
          {
            abortSignal: abortController.signal,
            requestTimeout: this.deadlines.totalTimeoutMs,
          },
        );
        return;
      }
      const upload = new sdk.Upload({
        client,
        params: { Bucket: this.config.bucket, Key: key, Body: body, ContentType: contentType },
        partSize: PART_SIZE,
        queueSize: QUEUE_SIZE,
        leavePartsOnError: false,
        abortController,
      });
      await upload.done();
    } catch (err) {
      throw describeBucketError(deadlineIn(deadline.signal.reason) ?? err);
    } finally {
      deadline.signal.removeEventListener("abort", abort);
      body.off("error", abort);
      taken?.destroy();
      deadline.dispose();
    }
  }

  /**
   * Where the caller fetches the copy: public_base_url + key, or a presigned GET valid
   * `expiresIn` seconds (url_expires_in unless given, at most 7 days) from `signingDate` (now unless given).
   */
  async urlOf(key: string, opts: { expiresIn?: number; signingDate?: Date } = {}): Promise<string> {
    const { publicBaseUrl, bucket, urlExpiresIn } = this.config;
    if (publicBaseUrl)
      return `${publicBaseUrl.replace(/\/+$/, "")}/${key.split("/").map(encodeURIComponent).join("/")}`;
    // Signing is local with the client's static key, but it goes through the SDK's providers
    // (region, credentials), which could be slow: it is held to one request's deadline too.
    const deadline = this.deadline("presigning a URL of the bucket", undefined, this.deadlines.requestTimeoutMs);
    try {
      const sign = async () => {
        const { sdk, client } = await this.s3.get();
        return sdk.getSignedUrl(client, new sdk.GetObjectCommand({ Bucket: bucket, Key: key }), {
          expiresIn: Math.min(opts.expiresIn ?? urlExpiresIn, MAX_URL_EXPIRES_IN),
          ...(opts.signingDate ? { signingDate: opts.signingDate } : {}),
        });
      };
      return await raceSignal(sign(), deadline.signal);
    } catch (err) {
      throw describeBucketError(err);
    } finally {
      deadline.dispose();
    }
  }

  /**
   * Reads a copy back (the dashboard shows it from the relay's own origin). The answer comes
   * within answerTimeoutMs; the read, body included, has totalTimeoutMs, and the bucket must send
   * the body at minRate while its reader waits; either failing destroys the body with a
   * DeadlineError. The deadline ends with the body.
   */
  async open(key: string, signal?: AbortSignal): Promise<{ body: Readable; contentLength: number | null }> {
    const deadline = this.deadline("reading a copy from the bucket", signal);
    const answer = this.deadline("the bucket's answer to a read", deadline.signal, this.deadlines.answerTimeoutMs);
    let res;
    try {
      const { sdk, client } = await this.s3.get();
      res = await client.send(new sdk.GetObjectCommand({ Bucket: this.config.bucket, Key: key }), {
        abortSignal: answer.signal,
      });
    } catch (err) {
      deadline.dispose();
      throw describeBucketError(deadlineIn(answer.signal.reason) ?? err);
    } finally {
      answer.dispose();
    }
    const source = res.Body as Readable;
    const body = new RateGuard(this.deadlines.minRate, {
      what: "the bucket",
      blame: "writer",
      signal: deadline.signal,
      onClose: () => deadline.dispose(),
      ...this.timers,
    });
    pipeline(source, body, () => {});
    return { body, contentLength: res.ContentLength ?? null };
  }

  private deadline(what: string, parent: AbortSignal | undefined, ms = this.deadlines.totalTimeoutMs): Deadline {
    return startDeadline(ms, { what, ...(parent ? { parent } : {}), ...this.timers });
  }

  close(): void {
    this.s3.peek()?.client.destroy();
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
  // A passed deadline is an ordinary failure: a later round may find the bucket answering.
  const late = deadlineIn(err);
  if (late) return new BucketError(`bucket: ${late.message}`, true);
  const e = err as { name?: string; message?: string; code?: string; $metadata?: { httpStatusCode?: number } };
  if (e?.name === "AbortError") return new BucketError("upload aborted", true);
  if (e?.name === "TimeoutError")
    return new BucketError(
      `bucket did not answer in time: ${(e.message ?? "").replace(/^@smithy\/node-http-handler - /, "").slice(0, 200)}`,
      true,
    );
  const status = e?.$metadata?.httpStatusCode;
  const name = e?.name ?? "Error";
  const known = KNOWN[name];
  if (known) return new BucketError(`bucket: ${known}`, true);
  if (e?.code && /^E[A-Z]+$/.test(e.code))
    return new BucketError(`bucket unreachable: ${e.code === "EBLOCKED" ? e.message : e.code}`, true);
  const detail = (e?.message ?? "").replace(/\s+/g, " ").slice(0, 200);
  return new BucketError(
    `bucket answered ${status ? `HTTP ${status} ` : ""}${name}${detail && detail !== name ? `: ${detail}` : ""}`,
    true,
  );
}

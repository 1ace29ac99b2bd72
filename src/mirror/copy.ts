import { pipeline } from "node:stream";
import { BucketError, describeBucketError, type Bucket } from "./bucket.js";
import { extensionOf, objectKey } from "./output-urls.js";
import { Meter, SourceError, type SourceFetcher } from "./source.js";

/** One entry of `data.files` (docs/contract.md, "Outputs"): a copy, or why there is none. */
export type FileRecord =
  | {
      source_url: string;
      url: string;
      key: string;
      bytes: number;
      sha256: string;
      content_type: string;
      /** With PUBLIC_BASE_URL: the relay's lasting link to the copy (mirror/links.ts). */
      link?: string;
    }
  | { source_url: string; error: string };

export interface Copied {
  key: string;
  bytes: number;
  sha256: string;
  contentType: string;
}

/** Why one copy failed, and whether a later attempt may succeed. */
export class CopyError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly kind: string,
  ) {
    super(message);
    this.name = "CopyError";
  }
}

/**
 * Streams one output file into the bucket: source → meter (size limit, sha256) → upload. Nothing
 * holds the whole file: the upload reads parts of a bounded size as the source delivers them.
 * Whatever fails (the source, the limit, the bucket) ends the other side too. Each side carries its
 * own deadlines (a total one and a minimum rate, blaming that side: source.ts, bucket.ts), so a
 * copy ends within them whatever the output host or the bucket does, as a retryable CopyError.
 */
export async function copyFile(
  source: SourceFetcher,
  bucket: Bucket,
  req: { sourceUrl: string; taskId: string; n: number; maxBytes: number; signal: AbortSignal },
): Promise<Copied> {
  let opened;
  try {
    opened = await source.open(req.sourceUrl, req.signal);
  } catch (err) {
    throw asCopyError(err, source);
  }
  const contentType = opened.contentType ?? "application/octet-stream";
  const key = objectKey(bucket.config.prefix, req.taskId, req.n, extensionOf(req.sourceUrl, opened.contentType));
  const meter = new Meter(req.maxBytes);
  let sourceFailure: unknown = null;
  pipeline(opened.body, meter, (err) => {
    if (err) sourceFailure = err;
  });
  try {
    await bucket.upload(key, meter, contentType, req.signal, opened.contentLength);
  } catch (err) {
    // The source's own failure (too large, stalled) is the cause when it broke the upload; a
    // premature close is only the upload letting go of it.
    throw asCopyError(sourceFailure && !isConsumerClose(sourceFailure) ? sourceFailure : err, source);
  } finally {
    if (!opened.body.destroyed) opened.body.destroy();
  }
  if (sourceFailure) throw asCopyError(sourceFailure, source);
  return { key, bytes: meter.bytes, sha256: meter.sha256, contentType };
}

function isConsumerClose(err: unknown): boolean {
  const e = err as { code?: string; name?: string };
  return e?.code === "ERR_STREAM_PREMATURE_CLOSE" || e?.name === "AbortError" || e?.code === "UND_ERR_ABORTED";
}

function asCopyError(err: unknown, source: SourceFetcher): CopyError {
  if (err instanceof CopyError) return err;
  if (err instanceof SourceError) return new CopyError(err.message, err.retryable, err.kind);
  if (err instanceof BucketError) return new CopyError(err.message, err.retryable, "bucket");
  const e = err as { name?: string; $metadata?: unknown };
  if (e && (e.$metadata !== undefined || e.name === "AbortError")) return asCopyError(describeBucketError(err), source);
  return asCopyError(source.describe(err), source);
}

import { createHash } from "node:crypto";
import { pipeline, Transform, type Readable, type TransformCallback } from "node:stream";
import { Agent } from "undici";
import { deadlineIn, RateGuard, startDeadline, type MinRate, type Timers } from "../net/deadline.js";
import { createGuardedLookup, validateCallbackUrl, type Resolver } from "../net/address-guard.js";

/** A failure reading an output file; `retryable` when trying again later may succeed. */
export class SourceError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly kind: "blocked" | "redirect" | "too_large" | "http" | "network" | "stalled" | "deadline" | "too_slow",
  ) {
    super(message);
    this.name = "SourceError";
  }
}

export interface OpenedSource {
  body: Readable;
  contentType: string | null;
  contentLength: number | null;
}

export interface SourceOptions {
  allowPrivateNetworks: boolean;
  resolve?: Resolver;
  /** Longest wait for the headers, and for each next piece of the body (a stalled server). */
  idleTimeoutMs: number;
  maxBytes: number;
  /** Longest a whole download may take, from the request to the body's last byte (DOWNLOAD_DEADLINES). */
  totalTimeoutMs?: number;
  /** Slowest the output host may send the body while the copy waits for it (DOWNLOAD_DEADLINES). */
  minRate?: MinRate;
  /**
   * The rate a download with a declared Content-Length is given time for, and a grace for the
   * rest of the copy: its deadline is `graceMs + length / bytesPerSecond` when that is sooner than
   * `totalTimeoutMs` (DOWNLOAD_DEADLINES).
   */
  sizedFor?: SizedFor;
  connectTimeoutMs?: number;
  timers?: Timers;
}

export interface SizedFor {
  bytesPerSecond: number;
  graceMs: number;
}

/**
 * A download's deadlines (docs/decisions/0009-deadlines.md). A copy holds a slot of the mirror's
 * fair pool for as long as it lasts, so the time a file may take follows from its size: a declared
 * Content-Length gets 30 s plus its bytes at 128 KiB/s (an output of MIRROR_MAX_BYTES, 1 GiB, still
 * fits in the 30 minutes at 600 KB/s), and a host that sends less than 1 MiB in 30 s (a quarter of
 * that rate) while the copy waits for it is cut off within 30 s. Before, a host dripping just above
 * 32 KiB per 30 s held its slot for the whole 30 minutes whatever the file's size.
 */
export const DOWNLOAD_DEADLINES = {
  totalTimeoutMs: 30 * 60_000,
  minRate: { bytes: 1024 * 1024, windowMs: 30_000 },
  sizedFor: { bytesPerSecond: 128 * 1024, graceMs: 30_000 },
  connectTimeoutMs: 10_000,
} as const;

/** How long a download of `length` bytes may take: the grace plus its bytes at the sized rate, at most `totalMs`. */
export function sizedDeadlineMs(length: number, totalMs: number, sizedFor: SizedFor): number {
  return Math.min(totalMs, sizedFor.graceMs + Math.ceil((length / sizedFor.bytesPerSecond) * 1000));
}

/**
 * Reads output files through the same SSRF guard as webhook delivery: the URL is checked
 * (scheme, credentials, literal addresses), and the socket's DNS lookup vets every resolved
 * address, so a name that resolves to a private address is refused after resolution too.
 * Redirects are refused, not followed: the URL the upstream gave must serve the file.
 */
export class SourceFetcher {
  private readonly agent: Agent;

  constructor(private readonly opts: SourceOptions) {
    const lookup = createGuardedLookup({
      allowPrivateNetworks: opts.allowPrivateNetworks,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
    });
    this.agent = new Agent({
      connections: 16,
      connect: { lookup, timeout: opts.connectTimeoutMs ?? DOWNLOAD_DEADLINES.connectTimeoutMs },
    });
  }

  /**
   * Opens the output URL. The download's total deadline starts here and runs until the body is
   * read or let go of; the body handed back is held to the minimum rate while its reader waits,
   * and fails with a DeadlineError (through its reader's pipeline) when either passes.
   */
  async open(rawUrl: string, signal: AbortSignal): Promise<OpenedSource> {
    const checked = validateSourceUrl(rawUrl, this.opts.allowPrivateNetworks);
    if (!checked.ok) throw new SourceError(`blocked: ${checked.reason}`, false, "blocked");
    const url = new URL(checked.url);
    const timers = this.opts.timers ? { timers: this.opts.timers } : {};
    const deadline = startDeadline(this.opts.totalTimeoutMs ?? DOWNLOAD_DEADLINES.totalTimeoutMs, {
      what: "the output URL",
      parent: signal,
      ...timers,
    });
    let response;
    try {
      response = await this.agent.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: "GET",
        signal: deadline.signal,
        headersTimeout: this.opts.idleTimeoutMs,
        bodyTimeout: this.opts.idleTimeoutMs,
      });
    } catch (err) {
      deadline.dispose();
      throw describeSourceError(deadlineIn(deadline.signal.reason) ?? err, this.opts.idleTimeoutMs);
    }
    const { statusCode, headers, body } = response;
    // Destroying an undici body emits an error; unlistened, it would end the process.
    body.on("error", () => {}); // a read's failure reaches its reader through the pipeline
    if (statusCode !== 200) {
      deadline.dispose();
      body.destroy();
      if (statusCode >= 300 && statusCode < 400) {
        throw new SourceError(
          `redirect (${statusCode}) not followed: the output URL must serve the file itself`,
          false,
          "redirect",
        );
      }
      // 408, 429 and 5xx may pass; any other 4xx will not.
      const retryable = statusCode === 408 || statusCode === 429 || statusCode >= 500;
      throw new SourceError(`the output URL answered HTTP ${statusCode}`, retryable, "http");
    }
    const lengthHeader = one(headers["content-length"]);
    const contentLength = lengthHeader && /^\d+$/.test(lengthHeader) ? Number(lengthHeader) : null;
    if (contentLength !== null && contentLength > this.opts.maxBytes) {
      deadline.dispose();
      body.destroy();
      throw tooLarge(this.opts.maxBytes, contentLength);
    }
    if (contentLength !== null) {
      // The slot this copy holds is held for what the file's size needs, not the largest file's.
      const total = this.opts.totalTimeoutMs ?? DOWNLOAD_DEADLINES.totalTimeoutMs;
      const sizedFor = this.opts.sizedFor ?? DOWNLOAD_DEADLINES.sizedFor;
      deadline.tighten(
        sizedDeadlineMs(contentLength, total, sizedFor),
        `${contentLength} bytes at ${sizedFor.bytesPerSecond} bytes/s`,
      );
    }
    const guarded = new RateGuard(this.opts.minRate ?? DOWNLOAD_DEADLINES.minRate, {
      what: "the output URL",
      blame: "writer",
      signal: deadline.signal,
      onClose: () => deadline.dispose(),
      ...timers,
    });
    // Either side's end ends the other: a guard that fails lets go of the socket.
    pipeline(body, guarded, () => {});
    const type = one(headers["content-type"]);
    return { body: guarded, contentType: type && /^[\x20-\x7e]{1,200}$/.test(type) ? type : null, contentLength };
  }

  /** A failure while reading, in words a caller can act on. */
  describe(err: unknown): SourceError {
    return describeSourceError(err, this.opts.idleTimeoutMs);
  }

  async close(): Promise<void> {
    await this.agent.destroy();
  }
}

function one(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

export function tooLarge(maxBytes: number, seen: number | null): SourceError {
  return new SourceError(
    `larger than MIRROR_MAX_BYTES (${maxBytes} bytes)${seen !== null ? `: ${seen} bytes` : ""}`,
    false,
    "too_large",
  );
}

/** http or https (an output URL is the upstream's, not the caller's), with the callback URL's address checks. */
export function validateSourceUrl(
  raw: string,
  allowPrivateNetworks: boolean,
): { ok: true; url: string } | { ok: false; reason: string } {
  // The callback check refuses plain http in production; for a download it is the address that matters.
  const probe = raw.replace(/^http:\/\//i, "https://");
  const checked = validateCallbackUrl(probe, { allowPrivateNetworks });
  if (!checked.ok) return checked;
  return { ok: true, url: /^http:\/\//i.test(raw) ? checked.url.replace(/^https:/, "http:") : checked.url };
}

/** Counts and hashes what streams through, and fails the stream once it passes `maxBytes`. */
export class Meter extends Transform {
  bytes = 0;
  private readonly hash = createHash("sha256");
  private digest: string | null = null;

  constructor(private readonly maxBytes: number) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.maxBytes) {
      done(tooLarge(this.maxBytes, null));
      return;
    }
    this.hash.update(chunk);
    done(null, chunk);
  }

  override _flush(done: TransformCallback): void {
    this.digest = this.hash.digest("hex");
    done();
  }

  get sha256(): string {
    if (this.digest === null) throw new Error("the stream has not ended");
    return this.digest;
  }
}

export function describeSourceError(err: unknown, idleTimeoutMs: number): SourceError {
  if (err instanceof SourceError) return err;
  const chain: Array<{ code?: unknown; message?: string; cause?: unknown; name?: string }> = [];
  for (let e: unknown = err; e && chain.length < 8; e = (e as { cause?: unknown }).cause) chain.push(e as never);
  const blocked = chain.find((e) => e.code === "EBLOCKED");
  if (blocked) return new SourceError(`blocked: ${blocked.message}`, false, "blocked");
  // A passed deadline is an ordinary failure: the next round may find the host faster.
  const late = deadlineIn(err);
  if (late) return new SourceError(late.message, true, late.kind === "total" ? "deadline" : "too_slow");
  if (chain.some((e) => e.code === "UND_ERR_HEADERS_TIMEOUT" || e.code === "UND_ERR_BODY_TIMEOUT")) {
    return new SourceError(`the output URL stalled: nothing received for ${idleTimeoutMs} ms`, true, "stalled");
  }
  const code = chain.map((e) => e.code).find((c) => typeof c === "string") as string | undefined;
  const first = chain[0];
  return new SourceError(
    `reading the output URL failed: ${code ?? first?.message?.slice(0, 200) ?? "unknown error"}`,
    true,
    "network",
  );
}

import type { UpstreamErrorInfo } from "./types.js";

export type UpstreamErrorKind = "http" | "network" | "timeout" | "malformed";

export interface UpstreamErrorInit {
  kind: UpstreamErrorKind;
  message: string;
  /** HTTP status when kind === "http" (a malformed 2xx also keeps its status). */
  status?: number | null;
  code: string;
  requestId?: string | null;
  retryAfterMs?: number | null;
  /** Defaults to the classification of kind and status (see isRetryable). */
  retryable?: boolean;
  details?: unknown;
  cause?: unknown;
}

/**
 * Whether a failed call may be repeated unchanged (with the same Idempotency-Key).
 * The reference says 5xx: retry with backoff; 4xx other than 408/429 are the
 * caller's fault and repeating them unchanged cannot succeed. Transport failures
 * and unreadable 2xx bodies say nothing about the request, so they are retried.
 */
export function isRetryable(kind: UpstreamErrorKind, status: number | null): boolean {
  if (kind !== "http") return true;
  if (status === null) return true;
  if (status >= 500) return true;
  return status === 408 || status === 429;
}

/** One error type for every way a call to the upstream can fail; it says itself whether it is retryable. */
export class UpstreamError extends Error {
  readonly kind: UpstreamErrorKind;
  readonly status: number | null;
  readonly code: string;
  readonly requestId: string | null;
  readonly retryAfterMs: number | null;
  readonly retryable: boolean;
  readonly details: unknown;

  constructor(init: UpstreamErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "UpstreamError";
    this.kind = init.kind;
    this.status = init.status ?? null;
    this.code = init.code;
    this.requestId = init.requestId ?? null;
    this.retryAfterMs = init.retryAfterMs ?? null;
    this.retryable = init.retryable ?? isRetryable(init.kind, this.status);
    this.details = init.details;
  }

  /** The form stored on a failed task and shown to the relay's callers. */
  toInfo(): UpstreamErrorInfo {
    return { code: this.code, message: this.message, request_id: this.requestId };
  }
}

function is429(e: unknown): e is UpstreamError {
  return e instanceof UpstreamError && e.kind === "http" && e.status === 429;
}

/** 429 concurrent_limit: not a failure; the task waits until a running task of the account ends. */
export function isConcurrentLimit(e: unknown): e is UpstreamError {
  return is429(e) && e.code === "concurrent_limit";
}

/**
 * 429 rate_limit: pause the account's calls for Retry-After. A 429 without a code,
 * or with a code we do not know, is read as a rate limit too: the status alone
 * already says "slow down", and treating it as anything else would keep hammering.
 */
export function isRateLimit(e: unknown): e is UpstreamError {
  return is429(e) && e.code !== "concurrent_limit";
}

/**
 * The relay's error codes: the upstream's table (docs/upstream.md) plus the relay's own.
 * One code → one status, so a handler never picks a status by hand.
 */
export const ERROR_STATUS = {
  invalid_request: 400,
  invalid_media_url: 400,
  invalid_callback_url: 400,
  invalid_api_key: 401,
  insufficient_points: 402,
  membership_required: 402,
  task_not_found: 404,
  not_found: 404,
  method_not_allowed: 405,
  idempotency_key_reused: 409,
  cannot_cancel: 409,
  encryption_key_required: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  validation_error: 422,
  rate_limit: 429,
  concurrent_limit: 429,
  storage_limit: 429,
  internal_error: 500,
  service_unavailable: 503,
  storage_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface FieldProblem {
  field: string;
  message: string;
}

/** A failure a caller can act on; the HTTP layer turns it into the error envelope. */
export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = "ApiError";
    this.status = ERROR_STATUS[code];
  }

  get retryable(): boolean {
    return this.status === 429 || this.status >= 500;
  }
}

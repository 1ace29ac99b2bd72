/**
 * The upstream's error envelope (docs/upstream.md, "Errors"). Handlers throw SimError;
 * the app's onError turns it into `{"error":{code,message,request_id,details?}}`
 * so no handler builds an error body by hand and none can forget request_id.
 */
export type SimErrorCode =
  | "invalid_request"
  | "invalid_media_url"
  | "invalid_api_key"
  | "insufficient_points"
  | "task_not_found"
  | "idempotency_key_reused"
  | "validation_error"
  | "rate_limit"
  | "concurrent_limit"
  | "not_found"
  | "internal_error";

export type SimErrorStatus = 400 | 401 | 402 | 404 | 409 | 422 | 429 | 500;

export interface FieldProblem {
  field: string;
  message: string;
}

export class SimError extends Error {
  constructor(
    readonly status: SimErrorStatus,
    readonly code: SimErrorCode,
    message: string,
    readonly details?: FieldProblem[],
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "SimError";
  }
}

export function errorBody(err: SimError, requestId: string): object {
  const error: Record<string, unknown> = { code: err.code, message: err.message, request_id: requestId };
  if (err.details) error.details = err.details;
  return { error };
}

export const invalidRequest = (message: string, details?: FieldProblem[]) =>
  new SimError(400, "invalid_request", message, details);

export {
  DEFAULT_TIMEOUT_MS,
  IDEMPOTENCY_KEY_PATTERN,
  UpstreamClient,
  isValidIdempotencyKey,
  type UpstreamClientOptions,
} from "./client.js";
export { UpstreamError, isConcurrentLimit, isRateLimit, isRetryable, type UpstreamErrorKind } from "./errors.js";
export { mapStatus, parseErrorBody, parseRetryAfter, parseTask, parseTaskList } from "./parse.js";
export type { CreateResult, TaskPage, TaskType, UpstreamErrorInfo, UpstreamTask, UpstreamUsage } from "./types.js";

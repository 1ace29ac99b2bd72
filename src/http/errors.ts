import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ZodError } from "zod";
import { ApiError, ERROR_STATUS, type ErrorCode } from "../services/errors.js";
import type { Logger } from "../logger.js";
import { isDatabaseUnavailable, type DatabaseHealth } from "../store/database-health.js";
import { StoreValueError } from "../store/values.js";
import { loggedPath } from "./log-path.js";

export interface ErrorBody {
  error: { code: ErrorCode; message: string; request_id: string; details?: unknown };
}

export function errorResponse(
  c: Context,
  code: ErrorCode,
  message: string,
  details?: unknown,
  headers?: Record<string, string>,
): Response {
  const body: ErrorBody = { error: { code, message, request_id: (c.get("requestId") as string | undefined) ?? "" } };
  if (details !== undefined) body.error.details = details;
  const res = c.json(body, ERROR_STATUS[code] as 400);
  for (const [k, v] of Object.entries(headers ?? {})) res.headers.set(k, v);
  return res;
}

export function zodDetails(error: ZodError): { field: string; message: string; did_you_mean?: string }[] {
  return error.issues.map((issue) => {
    const meant =
      issue.code === "custom" ? (issue.params as { did_you_mean?: unknown } | undefined)?.did_you_mean : undefined;
    return {
      field: issue.path.length > 0 ? issue.path.map(String).join(".") : "(body)",
      message: issue.message,
      ...(typeof meant === "string" ? { did_you_mean: meant } : {}),
    };
  });
}

/**
 * How a failed validation becomes an error: a body that is not an object or a bad header is a
 * malformed request (400); a bad callback URL has its own code (400); bad fields are 422 with
 * details naming each of them.
 */
export function validationFailure(c: Context, target: string, error: ZodError): Response {
  const details = zodDetails(error);
  if (target === "header")
    return errorResponse(c, "invalid_request", "A request header is missing or invalid.", details);
  if (target === "query") return errorResponse(c, "invalid_request", "A query parameter is invalid.", details);
  if (target === "param") return errorResponse(c, "invalid_request", "A path parameter is invalid.", details);
  if (details.some((d) => d.field === "(body)"))
    return errorResponse(c, "invalid_request", "The request body must be a JSON object.", details);
  if (details.every((d) => d.field === "callback_url")) {
    return errorResponse(c, "invalid_callback_url", "callback_url is not acceptable.", details);
  }
  return errorResponse(c, "validation_error", "Some request fields are invalid.", details);
}

/** PostgreSQL refusing text it cannot hold (SQLSTATE 22021 NUL / invalid UTF-8, 22P05 untranslatable character). */
export function isUnstorableText(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "22021" || code === "22P05";
}

export function onError(logger: Logger, database?: DatabaseHealth) {
  return (err: Error, c: Context): Response => {
    if (err instanceof ApiError) return errorResponse(c, err.code, err.message, err.details, err.headers);
    if (isDatabaseUnavailable(err)) {
      // Nothing was committed: say so, and when to come back. One log line per few seconds, not per request.
      database?.failed(err, `${c.req.method} ${loggedPath(c.req.path)}`);
      return errorResponse(
        c,
        "storage_unavailable",
        "The relay cannot store changes right now (storage full or failing); nothing was changed. Retry later.",
        undefined,
        {
          "Retry-After": "5",
        },
      );
    }
    if (err instanceof StoreValueError) {
      // A value no driver stores or compares (NUL to write, a fraction, a key over 2 KiB) that no schema caught: the caller's value, not our fault.
      return errorResponse(
        c,
        "invalid_request",
        `The request contains a value the relay cannot store: ${err.message}.`,
      );
    }
    if (isUnstorableText(err)) {
      // A NUL (or bytes PostgreSQL cannot encode) in an id, cursor or search that no schema caught: the caller's text, not our fault.
      return errorResponse(c, "invalid_request", "The request contains text that cannot be stored or looked up (NUL).");
    }
    if (err instanceof HTTPException) {
      if (err.status === 413)
        return errorResponse(c, "payload_too_large", "The request body is larger than 1 MiB.", undefined, {
          Connection: "close",
        });
      if (err.status === 400) return errorResponse(c, "invalid_request", err.message || "Malformed request.");
      if (err.status === 401) return errorResponse(c, "invalid_api_key", "Missing or invalid API key.");
    }
    logger.error({ err, request_id: c.get("requestId") }, "unhandled error");
    return errorResponse(c, "internal_error", "Something went wrong on our side. Retry with the same Idempotency-Key.");
  };
}

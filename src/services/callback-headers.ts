import type { FieldProblem } from "./errors.js";
import { isReservedHeader, RESERVED_HEADER_MESSAGE } from "../webhooks/callback-headers.js";

/**
 * Callback headers (docs/contract.md, "Callback headers"): a token a Zapier, Make or n8n catch hook checks, since those cannot
 * verify an HMAC. A task's own and a client's defaults are stored sealed (RELAY_ENCRYPTION_KEY when
 * set, like webhook secrets) and never shown: reads, the feed, logs, the CLI and the dashboard see
 * names only. They are sent with every attempt; the relay's own headers always win.
 */
export const MAX_CALLBACK_HEADERS = 8;
/** Exported, with the value rule and the reserved names, for the request schemas that publish them (src/http/schemas.ts). */
export const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$/;
/** Visible ASCII, with spaces allowed inside (`Bearer abc`), never at either end. */
export const HEADER_VALUE = /^[\x21-\x7e](?:[\x20-\x7e]{0,1022}[\x21-\x7e])?$/;

/** Every problem of a `callback_headers` value, each naming the header (never its value). */
export function callbackHeaderProblems(value: unknown, field = "callback_headers"): FieldProblem[] {
  if (value === undefined || value === null) return [];
  if (typeof value !== "object" || Array.isArray(value))
    return [{ field, message: "must be an object of header names to string values" }];
  const entries = Object.entries(value as Record<string, unknown>);
  const problems: FieldProblem[] = [];
  if (entries.length > MAX_CALLBACK_HEADERS)
    problems.push({ field, message: `at most ${MAX_CALLBACK_HEADERS} headers` });
  const seen = new Set<string>();
  for (const [name, v] of entries) {
    const at = `${field}.${name.length > 64 ? `${name.slice(0, 64)}…` : name}`;
    if (!HEADER_NAME.test(name))
      problems.push({
        field: at,
        message: "a header name is an HTTP token (letters, digits, !#$%&'*+-.^_`|~) of at most 64 characters",
      });
    else if (isReservedHeader(name)) {
      problems.push({ field: at, message: RESERVED_HEADER_MESSAGE });
    } else if (seen.has(name.toLowerCase()))
      problems.push({ field: at, message: "is given twice (header names are case-insensitive)" });
    seen.add(name.toLowerCase());
    if (typeof v !== "string") problems.push({ field: at, message: "must be a string" });
    else if (!HEADER_VALUE.test(v))
      problems.push({ field: at, message: "must be 1 to 1024 visible ASCII characters (spaces only inside)" });
  }
  return problems;
}

import type { Context, TypedResponse } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { JSONParsed, JSONValue } from "hono/utils/types";
import { stringifyWithText } from "../upstream/json-text.js";

/**
 * `c.json(value, status)` for answers that carry stored JSON (a task's output as a JsonText): the
 * stored text is spliced in as it is, not parsed and written again on the event loop (issue #38
 * item 7). Typed as c.json's answer, which it is byte for byte.
 */
export function jsonAnswer<T extends JSONValue | object, S extends ContentfulStatusCode>(
  c: Context,
  value: T,
  status: S,
): Response & TypedResponse<JSONParsed<T>, S, "json"> {
  const answer: Response = c.body(stringifyWithText(value), status, { "Content-Type": "application/json" });
  return answer as Response & TypedResponse<JSONParsed<T>, S, "json">;
}

import type { Context, TypedResponse } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { JSONParsed, JSONValue } from "hono/utils/types";
import { type PiecedJsonText, chunksOfParts, stringifyInParts } from "../upstream/json-text.js";

/**
 * `c.json(value, status)` for answers that carry stored JSON (a task's output as a JsonText): the
 * stored text is spliced in as it is, not parsed and written again on the event loop (issue #38
 * item 7). An output stored in pieces (a PiecedJsonText, core/stored-output.ts) is streamed: each
 * piece read as bytes and sent in a step of its own, so a 7 MB output never becomes one string or
 * one buffer here. Typed as c.json's answer, which it is byte for byte.
 */
export function jsonAnswer<T extends JSONValue | object, S extends ContentfulStatusCode>(
  c: Context,
  value: T,
  status: S,
): Response & TypedResponse<JSONParsed<T>, S, "json"> {
  const parts = stringifyInParts(value);
  const headers = { "Content-Type": "application/json" };
  const answer: Response =
    parts.length === 1 && typeof parts[0] === "string"
      ? c.body(parts[0], status, headers)
      : c.body(streamOf(parts), status, headers);
  return answer as Response & TypedResponse<JSONParsed<T>, S, "json">;
}

/**
 * The parts in order as UTF-8, one piece per pull: the JSON around encoded, each stored piece's bytes
 * as they were read. A piece that cannot be read cuts the answer (the client sees it unfinished).
 */
function streamOf(parts: Array<string | PiecedJsonText>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  async function* chunks(): AsyncGenerator<Uint8Array> {
    for await (const chunk of chunksOfParts(parts)) yield typeof chunk === "string" ? encoder.encode(chunk) : chunk;
  }
  const iterator = chunks();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel() {
      await iterator.return(undefined);
    },
  });
}

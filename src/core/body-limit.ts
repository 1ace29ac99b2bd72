import { stringifyWithText } from "../upstream/json-text.js";
import type { FlatTask } from "./task-view.js";

/**
 * The largest webhook body the relay sends, in serialized UTF-8 bytes (docs/contract.md,
 * "Body size by the bytes sent"). A list item of GET /openapi/v1/tasks is held to the same size, so
 * a list read builds at most this much per task.
 */
export const WEBHOOK_BODY_MAX_BYTES = 256 * 1024;

/** UTF-8 bytes of a string as JSON.stringify writes it, quotes included. */
export function jsonStringBytes(text: string): number {
  return 2 + prefixWithin(text, Infinity).bytes;
}

/**
 * The longest prefix of `text` whose JSON encoding (without quotes) takes at most `budget` bytes,
 * and those bytes: escapes count as written (`\"` 2, a control character 2 or 6, a lone surrogate
 * 6), a surrogate pair is never split.
 */
function prefixWithin(text: string, budget: number): { end: number; bytes: number } {
  let bytes = 0;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    let cost: number;
    let width = 1;
    if (c === 0x22 || c === 0x5c) cost = 2;
    else if (c < 0x20) cost = c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d ? 2 : 6;
    else if (c < 0x80) cost = 1;
    else if (c < 0x800) cost = 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        cost = 4;
        width = 2;
      } else cost = 6;
    } else if (c >= 0xdc00 && c <= 0xdfff) cost = 6;
    else cost = 3;
    if (bytes + cost > budget) break;
    bytes += cost;
    i += width;
  }
  return { end: i, bytes };
}

/** `text` cut so that its JSON string takes at most `maxBytes` (quotes included). */
export function cutToJsonBytes(text: string, maxBytes: number): string {
  return text.slice(0, prefixWithin(text, Math.max(0, maxBytes - 2)).end);
}

/** Strings left in a body after every other cut are cut to this (only rows stored before the request bounds hold longer ones). */
const LAST_RESORT_STRING_BYTES = 1024;

/**
 * `data` (a flattened task) made small enough that `wrap(data)` serializes to at most `maxBytes` of
 * UTF-8, and that serialization. One rule for every task body the relay builds (webhook events, list
 * items), applied in this order only while the body is still too large:
 * 1. the output is left out: `output: null, output_omitted: true` (read it from GET /tasks/{id});
 * 2. the error message is cut: `error.message_truncated: true`;
 * 3. files are left out from the end: `files_truncated: true`;
 * 4. any other long string is cut (bounded at intake since; only older rows reach this).
 * The body is always built; nothing here throws.
 */
export function fitTaskData<D extends FlatTask>(
  data: D,
  maxBytes: number,
  wrap: (data: D) => unknown = (d) => d,
): { data: D; json: string } {
  let fitted = data;
  let json = stringifyWithText(wrap(fitted));
  let size = Buffer.byteLength(json, "utf8");
  const remeasure = () => {
    json = stringifyWithText(wrap(fitted));
    size = Buffer.byteLength(json, "utf8");
    return size > maxBytes;
  };
  if (size <= maxBytes) return { data: fitted, json };

  if (fitted.output !== null && fitted.output !== undefined) {
    fitted = { ...fitted, output: null, output_omitted: true };
    if (!remeasure()) return { data: fitted, json };
  }

  const error = fitted.error;
  if (error && typeof error.message === "string" && error.message.length > 0) {
    const flag = error.message_truncated ? 0 : Buffer.byteLength(',"message_truncated":true');
    const room = jsonStringBytes(error.message) - (size - maxBytes) - flag;
    fitted = {
      ...fitted,
      error: { ...error, message: cutToJsonBytes(error.message, Math.max(2, room)), message_truncated: true },
    };
    if (!remeasure()) return { data: fitted, json };
  }

  if (fitted.files && fitted.files.length > 0) {
    const flag = fitted.files_truncated ? 0 : Buffer.byteLength(',"files_truncated":true');
    let over = size - maxBytes + flag;
    const files = [...fitted.files];
    // Each file's share of the body: its JSON and the comma before it.
    while (files.length > 0 && over > 0) over -= Buffer.byteLength(JSON.stringify(files.pop()), "utf8") + 1;
    fitted = { ...fitted, files, files_truncated: true };
    if (!remeasure()) return { data: fitted, json };
  }

  fitted = cutLongStrings(fitted, LAST_RESORT_STRING_BYTES) as D;
  if (!remeasure()) return { data: fitted, json };
  // Nothing of a bounded row is left to cut; an unbounded old one keeps its identity and status.
  fitted = {
    ...fitted,
    metadata: null,
    files: [],
    files_truncated: true,
    callback: { ...fitted.callback, url: fitted.callback.url && cutToJsonBytes(fitted.callback.url, 256) },
  };
  remeasure();
  return { data: fitted, json };
}

function cutLongStrings(value: unknown, maxBytes: number): unknown {
  if (typeof value === "string") return jsonStringBytes(value) > maxBytes ? cutToJsonBytes(value, maxBytes) : value;
  if (Array.isArray(value)) return value.map((v) => cutLongStrings(v, maxBytes));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).map(([k, v]) => [
        cutToJsonBytes(k, maxBytes),
        cutLongStrings(v, maxBytes),
      ]),
    );
  }
  return value;
}

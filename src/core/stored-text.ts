const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text from outside (a receiver's answer, an error message) made storable on both databases:
 * well-formed UTF-16 (so valid UTF-8 once encoded), no NUL (PostgreSQL refuses it in text), and at
 * most `maxBytes` of UTF-8, cut at a character boundary. One bad record must never fail the
 * bookkeeping of another (docs/contract.md, "Bookkeeping"), so every stored answer passes through here.
 */
export function storableText(text: string | null | undefined, maxBytes: number): string | null {
  if (text === null || text === undefined) return null;
  let clean = text.replace(LONE_SURROGATE, "\uFFFD").replaceAll("\u0000", "\uFFFD");
  if (Buffer.byteLength(clean, "utf8") <= maxBytes) return clean;
  const bytes = Buffer.from(clean, "utf8");
  let end = maxBytes;
  // Back up to the start of a character: UTF-8 continuation bytes are 10xxxxxx.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  clean = bytes.subarray(0, end).toString("utf8");
  return clean;
}

/** The first 4 KiB of a receiver's answer, as stored with each attempt. */
export const ANSWER_BYTES = 4096;
/** Error texts are short by nature; a longer one is cut. */
export const ERROR_BYTES = 1024;

/**
 * The longest error message a task stores (UTF-8 bytes): an upstream may send 300,000 characters,
 * and every read, list item and webhook would carry them. A longer one is cut, with
 * `message_truncated: true` beside it.
 */
export const STORED_ERROR_MESSAGE_BYTES = 16 * 1024;

/** A task's error (its stored JSON) with the message cut to STORED_ERROR_MESSAGE_BYTES; short ones pass untouched, unparsed. */
export function storableErrorJson(errorJson: string): string {
  // Bytes are at least UTF-16 units: a short text is short in bytes too, and is not parsed.
  if (errorJson.length <= STORED_ERROR_MESSAGE_BYTES) return errorJson;
  let error: unknown;
  try {
    error = JSON.parse(errorJson);
  } catch {
    return errorJson;
  }
  if (error === null || typeof error !== "object" || typeof (error as { message?: unknown }).message !== "string")
    return errorJson;
  const message = (error as { message: string }).message;
  if (Buffer.byteLength(message, "utf8") <= STORED_ERROR_MESSAGE_BYTES) return errorJson;
  return JSON.stringify({
    ...error,
    message: storableText(message, STORED_ERROR_MESSAGE_BYTES),
    message_truncated: true,
  });
}

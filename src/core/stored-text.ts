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

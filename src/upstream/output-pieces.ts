/**
 * How a long task output is cut for storage (core/stored-output.ts, issue #38 item 7). It lives in
 * upstream/ because the parse worker makes the cut (upstream/json-offload.ts runs `outputPieces`
 * from its source): a 7 MB output reaches the main thread already in pieces.
 */

/** The longest output kept in the task row (UTF-16 units; at least as many UTF-8 bytes). */
export const OUTPUT_ROW_MAX_CHARS = 256 * 1024;

/** One piece of a longer output: at most 192 KiB of UTF-8, one short write and one short read. */
export const OUTPUT_PIECE_CHARS = 64 * 1024;

/** `text` in pieces of at most `size` UTF-16 units, never splitting a surrogate pair (each piece is well-formed on its own). */
export function outputPieces(text: string, size = OUTPUT_PIECE_CHARS): string[] {
  const pieces: string[] = [];
  let start = 0;
  while (start < text.length) {
    let end = Math.min(start + size, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

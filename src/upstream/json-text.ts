import { randomUUID } from "node:crypto";

/**
 * Set only while `stringifyWithText` or `stringifyInParts` runs (JSON.stringify is synchronous, so
 * nothing else can see it): each JsonText or PiecedJsonText met on the way is collected here and
 * written as a marker.
 */
let splicing: Array<string | PiecedJsonText> | null = null;
/** A NUL and a random id: no string from outside can pass for a marker. */
const MARK = `\u0000genrelay-text:${randomUUID()}:`;
const MARKER = new RegExp(`${JSON.stringify(MARK).slice(0, -1).replaceAll("\\", "\\\\")}(\\d+)"`, "g");

/**
 * A JSON value kept as its text (a task's stored output: issue #38 item 7). `jsonTextOf` reads it
 * without parsing and `stringifyWithText` writes it into an answer as it is; a plain JSON.stringify
 * of a value holding one still writes the right JSON (toJSON parses it: correct, only slower).
 */
export class JsonText {
  constructor(private readonly whole: string) {}
  get text(): string {
    return this.whole;
  }
  toJSON(): unknown {
    if (splicing !== null) return `${MARK}${splicing.push(this.text) - 1}`;
    return JSON.parse(this.text);
  }
}

/**
 * A long JsonText as the parse worker cut it: in the pieces it is stored in (core/stored-output.ts),
 * so a 7 MB output goes from the worker to its rows one piece at a time and is never one string on
 * the event loop. `text` joins them, for the few readers that need the whole (the mirror's URL scan).
 */
export class JsonPieces extends JsonText {
  private joined: string | null = null;

  constructor(readonly pieces: readonly string[]) {
    super("");
  }
  override get text(): string {
    this.joined ??= this.pieces.join("");
    return this.joined;
  }
}

/**
 * A long output's pieces still where the parse worker cut them, not on this heap (issue #38 item 7):
 * a SQLite store takes them as UTF-8 bytes moved from the worker and inserts them as text, so a
 * 7 MB output is never a string on the event loop; any other reader takes them one piece at a time.
 */
export interface HeldPieces {
  readonly count: number;
  /** The pieces in order, each fetched from the holder on its own. */
  read(): AsyncIterable<string>;
  /**
   * The pieces in order as UTF-8 bytes, each a buffer moved here from the holder (outside this
   * heap: no string of the output is made here); the holder forgets them once the last is taken.
   */
  bytes(): AsyncIterable<Uint8Array>;
}

/** A long output as the parse worker keeps it (HeldPieces): no text on this thread, sync or otherwise. */
export class HeldJsonPieces extends JsonText {
  constructor(readonly held: HeldPieces) {
    super("");
  }
  override get text(): string {
    throw new TypeError("a long output held by the parse worker is read or written in pieces, never whole");
  }
}

/** The stored pieces of a long output (JsonPieces or HeldJsonPieces); undefined for any other value. */
export function longPiecesOf(value: unknown): readonly string[] | HeldPieces | undefined {
  if (value instanceof JsonPieces) return value.pieces;
  if (value instanceof HeldJsonPieces) return value.held;
  return undefined;
}

/** Pieces still held by the parse worker, rather than here. */
export function isHeld(pieces: readonly string[] | HeldPieces): pieces is HeldPieces {
  return !Array.isArray(pieces);
}

/** The JSON text of a value (null for null/undefined); a JsonText is returned as it is, unparsed. */
export function jsonTextOf(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof JsonText ? value.text : JSON.stringify(value);
}

/**
 * A JSON value stored in pieces outside its row (a long task output, core/stored-output.ts): an
 * answer streams the pieces in order (stringifyInParts, http/json-answer.ts), so the whole text is
 * never one string on the event loop. It has no synchronous JSON form: anything else that meets
 * one throws, rather than send an answer without the output.
 */
export class PiecedJsonText {
  /** `pieces`: the stored pieces in order, as UTF-8 bytes (sent as they are: never a string here). */
  constructor(readonly pieces: () => AsyncIterable<Uint8Array>) {}
  toJSON(): unknown {
    if (splicing !== null) return `${MARK}${splicing.push(this) - 1}`;
    throw new TypeError("a stored output in pieces is written only by stringifyInParts");
  }
}

/** JSON.stringify(value) with the JsonTexts and PiecedJsonTexts inside written as markers, and what they stand for. */
function stringifyMarked(value: unknown): { json: string; texts: Array<string | PiecedJsonText> } {
  const texts: Array<string | PiecedJsonText> = [];
  splicing = texts;
  try {
    return { json: JSON.stringify(value), texts };
  } finally {
    splicing = null;
  }
}

/**
 * JSON.stringify(value), with every JsonText inside written as its stored text, byte for byte: the
 * rest (small) is serialized, the texts are spliced in, never parsed and written again. So a task
 * answer carries a 7 MB output for the cost of a copy, and says exactly what was stored.
 */
export function stringifyWithText(value: unknown): string {
  const { json, texts } = stringifyMarked(value);
  if (texts.length === 0) return json;
  return json.replace(MARKER, (_m, i: string) => {
    const text = texts[Number(i)]!;
    if (typeof text !== "string") throw new TypeError("a stored output in pieces is written only by stringifyInParts");
    return text;
  });
}

/**
 * As stringifyWithText, in parts: the JSON text around each PiecedJsonText, and the PiecedJsonText
 * itself where its pieces go. Without one, a single string.
 */
export function stringifyInParts(value: unknown): Array<string | PiecedJsonText> {
  const { json, texts } = stringifyMarked(value);
  if (texts.length === 0) return [json];
  const parts: Array<string | PiecedJsonText> = [];
  let text = "";
  let from = 0;
  for (const m of json.matchAll(MARKER)) {
    const stored = texts[Number(m[1])]!;
    text += json.slice(from, m.index);
    from = m.index + m[0].length;
    if (typeof stored === "string") text += stored;
    else {
      parts.push(text, stored);
      text = "";
    }
  }
  parts.push(text + json.slice(from));
  return parts;
}

/**
 * stringifyInParts' parts in order, empty ones left out: the JSON around as text, each stored piece
 * as the bytes it was read as (the answer writes them as they are, never decoded and encoded again).
 */
export async function* chunksOfParts(
  parts: ReadonlyArray<string | PiecedJsonText>,
): AsyncGenerator<string | Uint8Array> {
  for (const part of parts) {
    if (typeof part === "string") {
      if (part.length > 0) yield part;
      continue;
    }
    for await (const bytes of part.pieces()) if (bytes.byteLength > 0) yield bytes;
  }
}

import { randomUUID } from "node:crypto";

/**
 * Set only while `stringifyWithText` runs (JSON.stringify is synchronous, so nothing else can see
 * it): each JsonText met on the way is collected here and written as a marker.
 */
let splicing: string[] | null = null;
/** A NUL and a random id: no string from outside can pass for a marker. */
const MARK = `\u0000genrelay-text:${randomUUID()}:`;
const MARKER = new RegExp(`${JSON.stringify(MARK).slice(0, -1).replaceAll("\\", "\\\\")}(\\d+)"`, "g");

/**
 * A JSON value kept as its text (a task's stored output: issue #38 item 7). `jsonTextOf` reads it
 * without parsing and `stringifyWithText` writes it into an answer as it is; a plain JSON.stringify
 * of a value holding one still writes the right JSON (toJSON parses it: correct, only slower).
 */
export class JsonText {
  constructor(readonly text: string) {}
  toJSON(): unknown {
    if (splicing !== null) return `${MARK}${splicing.push(this.text) - 1}`;
    return JSON.parse(this.text);
  }
}

/** The JSON text of a value (null for null/undefined); a JsonText is returned as it is, unparsed. */
export function jsonTextOf(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof JsonText ? value.text : JSON.stringify(value);
}

/**
 * JSON.stringify(value), with every JsonText inside written as its stored text, byte for byte: the
 * rest (small) is serialized, the texts are spliced in, never parsed and written again. So a task
 * answer carries a 7 MB output for the cost of a copy, and says exactly what was stored.
 */
export function stringifyWithText(value: unknown): string {
  const texts: string[] = [];
  splicing = texts;
  let json: string;
  try {
    json = JSON.stringify(value);
  } finally {
    splicing = null;
  }
  if (texts.length === 0) return json;
  return json.replace(MARKER, (_m, i: string) => texts[Number(i)]!);
}

/**
 * A JSON value kept as its text. `jsonTextOf` reads it without parsing; JSON.stringify of a value
 * holding one still writes the right JSON (toJSON parses it: correct, only slower).
 */
export class JsonText {
  constructor(readonly text: string) {}
  toJSON(): unknown {
    return JSON.parse(this.text);
  }
}

/** The JSON text of a value (null for null/undefined); a JsonText is returned as it is, unparsed. */
export function jsonTextOf(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return value instanceof JsonText ? value.text : JSON.stringify(value);
}

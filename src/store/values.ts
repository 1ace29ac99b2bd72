/**
 * What a value must be to reach the store, the same on both drivers (the contract's "values"
 * section in store.ts). The drivers apply these rules where parameters are bound (SQLite's
 * statement wrapper, PostgreSQL's connections), so no operation checks its own arguments and no
 * database's own refusal (PostgreSQL's 22021 or 22P02, SQLite's silent REAL) reaches a caller.
 */

/** A value the store refuses on every driver. `code` is what callers branch on (the HTTP layer answers 400). */
export class StoreValueError extends Error {
  readonly code = "invalid_value" as const;
  override readonly name = "StoreValueError";
}

/**
 * Longest text (UTF-8 bytes) written to a column of an index. PostgreSQL refuses an index entry over
 * 2,704 bytes; each index holds at most one text a caller or the upstream chooses beside short
 * generated ids and states (events (client_id, destination_host, …), tasks (upstream_account,
 * upstream_task_id)), so 2 KiB always fits. SQLite has no such limit; the store holds both to this
 * one. A callback URL is at most 2,048 characters, so its host always fits; idempotency keys are 128.
 */
export const MAX_KEY_BYTES = 2048;

/** Where a bound value goes: written to a column, compared with stored ones, or a row limit. */
export type ValueUse = "write" | "compare" | "limit";

/** A number any driver holds as it is: every numeric column is a 64-bit integer and the relay's are epoch ms, counts and points. */
export function checkNumber(n: number, use: ValueUse): number {
  if (!Number.isSafeInteger(n))
    throw new StoreValueError(`${describe(n)} is not a whole number the store can hold exactly`);
  // A limit below 0 means no rows (PostgreSQL refuses it, SQLite would read it as no limit at all).
  return use === "limit" && n < 0 ? 0 : n;
}

/**
 * Text to write: NUL is refused (PostgreSQL text cannot hold it); lone surrogates become U+FFFD
 * (what PostgreSQL keeps, where SQLite would keep bytes that read back as three); an indexed
 * column takes at most MAX_KEY_BYTES.
 */
export function checkWrittenText(s: string, column?: string, key = false): string {
  if (s.includes("\u0000")) throw new StoreValueError(`text with NUL cannot be stored${column ? ` (${column})` : ""}`);
  const text = wellFormed(s);
  if (
    key &&
    text.length > MAX_KEY_BYTES / 3 &&
    (text.length > MAX_KEY_BYTES || Buffer.byteLength(text) > MAX_KEY_BYTES)
  ) {
    throw new StoreValueError(`${column ?? "a key"} is longer than ${MAX_KEY_BYTES} bytes`);
  }
  return text;
}

/** Text to compare with stored text: `null` when it holds NUL (no stored text can equal it), else well-formed. */
export function comparedText(s: string): string | null {
  return s.includes("\u0000") ? null : wellFormed(s);
}

export const holdsNul = (s: string): boolean => s.includes("\u0000");

/** Node 20 has String.prototype.toWellFormed; the ES2023 lib does not declare it yet. */
type WellFormed = { isWellFormed(): boolean; toWellFormed(): string };
export const wellFormed = (s: string): string =>
  (s as unknown as WellFormed).isWellFormed() ? s : (s as unknown as WellFormed).toWellFormed();

/** Numbers a JSON column keeps as they are: JSON has no NaN or Infinity (JSON.stringify would write null). */
export function finiteNumbers(values: readonly number[], what: string): readonly number[] {
  for (const v of values)
    if (!Number.isFinite(v)) throw new StoreValueError(`${what} must be finite numbers, not ${describe(v)}`);
  return values;
}

const describe = (n: number): string => (Number.isNaN(n) ? "NaN" : String(n));

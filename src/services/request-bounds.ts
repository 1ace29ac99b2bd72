import type { FieldProblem } from "./errors.js";

/**
 * What one creation may cost and store (docs/contract.md, "Bounded requests"), declared in one place:
 * intake refuses a body over any of these before anything is stored, and the OpenAPI document
 * publishes them. The request body itself is at most 1 MiB (src/http/middleware.ts).
 */
export const REQUEST_BOUNDS = {
  /** Top-level fields of a creation body: a body with more is refused before any per-field work. */
  maxFields: 64,
  /** Unknown fields that get a near-miss suggestion (the first ones, in body order). */
  maxSuggestedFields: 16,
  /** UTF-8 bytes of any string a task stores, at any depth (prompt excepted: 32,768 characters, checked by the schema). */
  maxStringBytes: 8 * 1024,
  /** Items of any array a task stores (image_urls, a model parameter's list). */
  maxArrayItems: 16,
  /** Keys of any object nested in the body (the body's own are maxFields). Nesting is bounded before, by the JSON reader (64 levels). */
  maxObjectKeys: 64,
  /** UTF-8 bytes of everything one task stores from its request (the request, metadata, headers, URL, keys). Each client's sum of them: CLIENT_MAX_STORED_BYTES. */
  maxStoredBytes: 256 * 1024,
} as const;

/**
 * The refusal of a body with more top-level fields than intake looks at (maxFields), or null: for
 * the schema to check before any per-field work (near misses, the catalog check), so a body of
 * 12,000 field names costs one count up to maxFields + 1.
 */
export function fieldCountProblem(body: Record<string, unknown>): FieldProblem | null {
  let n = 0;
  for (const key in body) {
    if (Object.hasOwn(body, key) && ++n > REQUEST_BOUNDS.maxFields)
      return {
        field: "(fields)",
        message: `at most ${REQUEST_BOUNDS.maxFields} fields are accepted in a request body`,
      };
  }
  return null;
}

/** Fields exempt from maxStringBytes, with the bound they have instead (in the request schema). */
const OWN_BOUND = new Set(["prompt"]);

/** At most this many problems are named: a body of thousands of bad values answers with the first ones. */
const MAX_PROBLEMS = 20;

const bytes = (s: string) => Buffer.byteLength(s, "utf8");

/**
 * Problems of what a creation would store, by one rule over the whole body: every string, array and
 * object at any depth, whatever its field (`image_urls`, `resolution`, a model parameter the catalog
 * passes). One walk, stopped at the first MAX_PROBLEMS, of a body within maxFields.
 */
export function storedRequestProblems(body: Record<string, unknown>): FieldProblem[] {
  const b = REQUEST_BOUNDS;
  const problems: FieldProblem[] = [];
  const tooMany = fieldCountProblem(body);
  if (tooMany) return [tooMany];
  const fields = Object.keys(body);
  const stack: Array<{ value: unknown; path: string; depth: number }> = [];
  for (const k of fields.reverse()) {
    if (bytes(k) > b.maxStringBytes)
      problems.push({
        field: `${k.slice(0, 64)}…`,
        message: `a field name must be at most ${b.maxStringBytes} bytes (UTF-8)`,
      });
    else stack.push({ value: body[k], path: k, depth: 0 });
  }
  while (stack.length > 0 && problems.length < MAX_PROBLEMS) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === "string") {
      if (!(depth === 0 && OWN_BOUND.has(path)) && bytes(value) > b.maxStringBytes)
        problems.push({ field: path, message: `must be at most ${b.maxStringBytes} bytes (UTF-8)` });
    } else if (Array.isArray(value)) {
      if (value.length > b.maxArrayItems)
        problems.push({ field: path, message: `must have at most ${b.maxArrayItems} items` });
      else
        for (let i = value.length - 1; i >= 0; i--)
          stack.push({ value: value[i], path: `${path}.${i}`, depth: depth + 1 });
    } else if (value !== null && typeof value === "object") {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length > b.maxObjectKeys)
        problems.push({ field: path, message: `must have at most ${b.maxObjectKeys} keys` });
      else {
        for (let i = entries.length - 1; i >= 0; i--) {
          const [k, v] = entries[i]!;
          const at = `${path}.${k.length > 64 ? `${k.slice(0, 64)}…` : k}`;
          if (bytes(k) > b.maxStringBytes)
            problems.push({ field: at, message: `a key must be at most ${b.maxStringBytes} bytes (UTF-8)` });
          else stack.push({ value: v, path: at, depth: depth + 1 });
        }
      }
    }
  }
  return problems.slice(0, MAX_PROBLEMS);
}

/** What one task stores from its request, in bytes: every text column intake writes (UTF-8). */
export function storedBytesOf(row: Record<string, unknown>): number {
  let total = 0;
  for (const v of Object.values(row)) if (typeof v === "string") total += bytes(v);
  return total;
}

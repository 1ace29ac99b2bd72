import type { Db } from "./open.js";

/**
 * Statements prepared once per database and reused: building a drizzle query costs several times
 * what SQLite takes to run a small one, so the hot paths (intake, claims, attempt records) build
 * theirs once, with placeholders, and only bind values per call. Prepared statements run on the
 * one connection, so also inside a transaction a drizzle `tx` has open on the same database.
 */
const cache = new WeakMap<Db, Map<string, unknown>>();

export function prepared<T>(db: Db, name: string, build: () => T): T {
  let statements = cache.get(db);
  if (!statements) cache.set(db, (statements = new Map()));
  let statement = statements.get(name) as T | undefined;
  if (statement === undefined) {
    statement = build();
    statements.set(name, statement);
  }
  return statement;
}

/**
 * The keys of a patch that set something (drizzle leaves undefined ones out of SET), sorted: a
 * statement prepared for one shape of patch serves every patch of that shape.
 */
export function patchShape(patch: Record<string, unknown>): string[] {
  return Object.keys(patch)
    .filter((k) => patch[k] !== undefined)
    .sort();
}

/** A sequence of ids bound as one JSON parameter: `col IN (SELECT value FROM json_each(?))` prepares once for any count. */
export const jsonList = (values: readonly (string | number)[]): string => JSON.stringify(values);

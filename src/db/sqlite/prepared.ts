import { getTableColumns, getTableName, sql } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
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

/**
 * Inserts a row binding every column of `table` (a column the row leaves out gets its schema's
 * plain default, else NULL) on an INSERT prepared once, without RETURNING: the bound row is the
 * stored row, and it is returned. `omit`: columns the database assigns (an INTEGER PRIMARY KEY).
 */
export function insertEveryColumn<R>(db: Db, table: SQLiteTable, row: object, omit: readonly string[] = []): R {
  const name = getTableName(table);
  const { columns, defaults, statement } = prepared(db, `insert:${name}`, () => {
    const all = Object.entries(getTableColumns(table)).filter(([key]) => !omit.includes(key));
    const columns = all.map(([key]) => key);
    const defaults = Object.fromEntries(
      all
        .filter(([, col]) => col.hasDefault && col.default !== undefined && typeof col.default !== "object")
        .map(([key, col]) => [key, col.default]),
    );
    const statement = (
      db.insert(table).values(Object.fromEntries(columns.map((c) => [c, sql.placeholder(c)])) as never) as unknown as {
        prepare(): { run(p: Record<string, unknown>): unknown };
      }
    ).prepare();
    return { columns, defaults: defaults as Record<string, unknown>, statement };
  });
  const bound: Record<string, unknown> = {};
  for (const c of columns) bound[c] = (row as Record<string, unknown>)[c] ?? defaults[c] ?? null;
  statement.run(bound);
  return bound as R;
}

import type Database from "better-sqlite3";
import { getTableColumns, getTableName } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import type { Db } from "./open.js";

/**
 * Statements prepared once per database and reused: building a drizzle query costs several times
 * what SQLite takes to run a small one, so the hot paths (intake, claims, attempt records) build
 * theirs once, with placeholders, and only bind values per call. Prepared statements run on the
 * one connection, so also inside a transaction a drizzle `tx` has open on the same database.
 */
const cache = new WeakMap<Db, Map<string, unknown>>();

/**
 * The better-sqlite3 connection under a drizzle database. Everything runs on this one connection,
 * so a statement prepared on it also runs inside a transaction drizzle has open.
 */
export function clientOf(db: Db): Database.Database {
  return (db as unknown as { $client: Database.Database }).$client;
}

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

/** A statement of a module's own SQL on better-sqlite3, prepared once per database (values bound by name or position). */
export function statement(db: Db, name: string, text: string): Database.Statement {
  return prepared(db, name, () => clientOf(db).prepare(text));
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

/** A column as a statement bound by position needs it: its SQL name and its value mapping. */
interface BoundColumn {
  name: string;
  mapToDriverValue(value: unknown): unknown;
}

/**
 * A statement bound by position, on better-sqlite3 itself, prepared once per database: drizzle's
 * prepared statements fill named placeholders per run (an entity check per parameter), which cost
 * more than SQLite's own work on an attempt's record (docs/performance.md, delivery's tenth round:
 * an attempt row and its event's UPDATE 142 against 83 µs CPU through drizzle and by position).
 * Each value goes through its column's mapping as drizzle's placeholders do, and the connection's
 * value rules (open.ts) as every statement does.
 */
function byPosition(db: Db, name: string, build: () => { text: string; columns: BoundColumn[] }) {
  return prepared(db, name, () => {
    const { text, columns } = build();
    return { columns, statement: clientOf(db).prepare(text) };
  });
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Inserts a row binding every column of `table` (a column the row leaves out gets its schema's
 * plain default, else NULL) on an INSERT prepared once, without RETURNING: the bound row is the
 * stored row, and it is returned. `omit`: columns the database assigns (an INTEGER PRIMARY KEY).
 */
export function insertEveryColumn<R>(db: Db, table: SQLiteTable, row: object, omit: readonly string[] = []): R {
  const name = getTableName(table);
  const { keys, defaults } = prepared(db, `insert:${name}:keys`, () => {
    const all = Object.entries(getTableColumns(table)).filter(([key]) => !omit.includes(key));
    const defaults = Object.fromEntries(
      all
        .filter(([, col]) => col.hasDefault && col.default !== undefined && typeof col.default !== "object")
        .map(([key, col]) => [key, col.default]),
    );
    return { keys: all.map(([key]) => key), defaults: defaults as Record<string, unknown> };
  });
  const { columns, statement } = byPosition(db, `insert:${name}`, () => {
    const columns = keys.map((key) => getTableColumns(table)[key] as unknown as BoundColumn);
    const text = `insert into ${quoted(name)} (${columns.map((c) => quoted(c.name)).join(", ")}) values (${columns.map(() => "?").join(", ")})`;
    return { text, columns };
  });
  const bound: Record<string, unknown> = {};
  const values: unknown[] = new Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const value = (row as Record<string, unknown>)[key] ?? defaults[key] ?? null;
    bound[key] = value;
    values[i] = columns[i]!.mapToDriverValue(value);
  }
  statement.run(...values);
  return bound as R;
}

/** One UPDATE of updateWhere: the patch's columns to set (patchShape), then the where columns. */
interface Update {
  shape: string[];
  columns: BoundColumn[];
  statement: Database.Statement;
}

/**
 * updateWhere's statements by database and table, keyed by the patch's set keys in its own order
 * and the where columns: a caller builds its patches the same way every time, so a call finds its
 * statement without sorting the keys and joining them into a name (docs/performance.md,
 * delivery's fourteenth round: the largest allocation of an attempt's record).
 */
const updates = new WeakMap<Db, WeakMap<SQLiteTable, Map<string, Update>>>();

/**
 * Sets the patch's columns (its keys that set something: patchShape) on the rows of `table` whose
 * `where` columns equal the values given, in that order; one statement prepared per shape of patch.
 * Returns how many rows changed.
 */
export function updateWhere(
  db: Db,
  table: SQLiteTable,
  patch: Record<string, unknown>,
  where: readonly string[],
  whereValues: readonly unknown[],
): number {
  let key = "";
  for (const name in patch) if (patch[name] !== undefined) key += `${name},`;
  for (let j = 0; j < where.length; j++) key += `|${where[j]}`;
  let byTable = updates.get(db);
  if (byTable === undefined) updates.set(db, (byTable = new WeakMap()));
  let byKey = byTable.get(table);
  if (byKey === undefined) byTable.set(table, (byKey = new Map()));
  let update = byKey.get(key);
  if (update === undefined) {
    const shape = patchShape(patch);
    const name = getTableName(table);
    const { columns, statement } = byPosition(db, `update:${name}:${shape.join(",")}:${where.join(",")}`, () => {
      const all = getTableColumns(table) as unknown as Record<string, BoundColumn>;
      const set = shape.map((k) => all[k]!);
      const text = `update ${quoted(name)} set ${set.map((c) => `${quoted(c.name)} = ?`).join(", ")} where ${where
        .map((k) => `${quoted(all[k]!.name)} = ?`)
        .join(" and ")}`;
      return { text, columns: [...set, ...where.map((k) => all[k]!)] };
    });
    update = { shape, columns, statement };
    byKey.set(key, update);
  }
  const { shape, columns, statement } = update;
  const values: unknown[] = new Array(columns.length);
  for (let i = 0; i < shape.length; i++) values[i] = columns[i]!.mapToDriverValue(patch[shape[i]!]);
  for (let j = 0; j < whereValues.length; j++)
    values[shape.length + j] = columns[shape.length + j]!.mapToDriverValue(whereValues[j]);
  return statement.run(...values).changes;
}

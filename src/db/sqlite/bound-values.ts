import { is, Table } from "drizzle-orm";
import { getTableConfig, type SQLiteTable } from "drizzle-orm/sqlite-core";
import { keyColumnsOf, planOf as planWith, type KeyColumns, type Plan } from "../kit/bound-values.js";
import * as schema from "./schema.js";

/** SQLite's facts for the store's value rules (db/kit/bound-values.ts): the key columns of its schema. */
export const KEY_COLUMNS: KeyColumns = keyColumnsOf(
  (Object.values(schema) as unknown[])
    .filter((value): value is SQLiteTable => is(value, Table))
    .map((table) => getTableConfig(table)),
);

/** A statement's plan under SQLite's key columns (the schemas match: see schema-parity.test.ts). */
export const planOf = (sql: string, dialect: "sqlite" | "postgres" = "sqlite"): Plan =>
  planWith(sql, dialect, KEY_COLUMNS);

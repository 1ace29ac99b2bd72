import { is, Table } from "drizzle-orm";
import { getTableConfig, type PgTable } from "drizzle-orm/pg-core";
import { keyColumnsOf, planOf as planWith, type KeyColumns, type Plan } from "../kit/bound-values.js";
import * as schema from "./schema.js";

/** PostgreSQL's facts for the store's value rules (db/kit/bound-values.ts): the key columns of its schema. */
export const KEY_COLUMNS: KeyColumns = keyColumnsOf(
  (Object.values(schema) as unknown[])
    .filter((value): value is PgTable => is(value, Table))
    .map((table) => getTableConfig(table)),
);

/** A statement's plan under PostgreSQL's key columns. */
export const planOf = (sql: string): Plan => planWith(sql, "postgres", KEY_COLUMNS);

import { getTableName, is, Table } from "drizzle-orm";
import { getTableConfig as pgTableConfig } from "drizzle-orm/pg-core";
import { getTableConfig as sqliteTableConfig } from "drizzle-orm/sqlite-core";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as pg from "../../src/db/pg/schema.js";
import * as sqlite from "../../src/db/sqlite/schema.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import type * as rows from "../../src/store/rows.js";

/**
 * The SQLite and Postgres schemas must describe the same rows: the same tables, the same column
 * names and the same `$inferSelect` / `$inferInsert` types. The type half is checked by
 * `tsc --noEmit -p tsconfig.json` (the first step of `npm test`; test/ is in that tsconfig), the
 * names at run time. Postgres-only tables and columns are declared in the lists below, on purpose
 * (see src/db/pg/schema.ts): account_leaders, the account leases of several processes (SQLite has one),
 * and delivery_keys, the per-key lock of several processes' event claims (SQLite's claims are one process's).
 * client_storage_log and client_storage_grants: stored bytes counted and decided without one row every
 * instance's writes wait on (SQLite has one writer). tasks_client_reserved_idx: PostgreSQL keeps it;
 * SQLite dropped it (migrations/0016), since no statement of its store implies the index's condition.
 */
const PG_ONLY_TABLES: string[] = ["account_leaders", "delivery_keys", "client_storage_log", "client_storage_grants"];
const PG_ONLY_COLUMNS: Record<string, string[]> = {};
const PG_ONLY_INDEXES: Record<string, string[]> = { tasks: ["tasks_client_reserved_idx"] };
type PgOnlyTableKey = "accountLeaders" | "deliveryKeys" | "clientStorageLog" | "clientStorageGrants";

/** The exported tables of a schema module, each as its select or insert row type. */
type Rows<M, Kind extends "$inferSelect" | "$inferInsert"> = {
  [N in keyof M as M[N] extends Table ? N : never]: M[N] extends Record<Kind, infer R> ? R : never;
};
type PgSelect = Rows<typeof pg, "$inferSelect">;
type PgInsert = Rows<typeof pg, "$inferInsert">;
type LiteSelect = Rows<typeof sqlite, "$inferSelect">;
type LiteInsert = Rows<typeof sqlite, "$inferInsert">;

/** Exactly the same type (not merely assignable either way), as `toEqualTypeOf` checks it. */
type Equal<X, Y> = (<T>() => T extends X ? 1 : 2) extends <T>() => T extends Y ? 1 : 2 ? true : false;
/** The names of the tables of `L` whose row type in `P` is missing or not exactly the same. */
type Differing<P, L> = {
  [N in keyof L]: N extends keyof P ? (Equal<P[N], L[N]> extends true ? never : N) : N;
}[keyof L];

/** Compiles only when `_Names` is `never`: no table named. */
function noTable<_Names extends never>(): void {}

function tablesOf(mod: Record<string, unknown>): Table[] {
  return Object.values(mod).filter((v): v is Table => is(v, Table));
}

/** A table's foreign keys as `columns->table`, sorted. */
function foreignKeysOf(config: {
  foreignKeys: { reference(): { columns: { name: string }[]; foreignTable: Table } }[];
}): string[] {
  return config.foreignKeys
    .map(
      (fk) =>
        `${fk
          .reference()
          .columns.map((c) => c.name)
          .join(",")}->${getTableName(fk.reference().foreignTable)}`,
    )
    .sort();
}

describe("the Store contract's rows (src/store/rows.ts) are exactly the schema's", () => {
  it("select and insert types of every table (checked by tsc)", () => {
    expectTypeOf<rows.TaskRow>().toEqualTypeOf<typeof sqlite.tasks.$inferSelect>();
    expectTypeOf<rows.NewTaskRow>().toEqualTypeOf<typeof sqlite.tasks.$inferInsert>();
    expectTypeOf<rows.EventRow>().toEqualTypeOf<typeof sqlite.events.$inferSelect>();
    expectTypeOf<rows.NewEventRow>().toEqualTypeOf<typeof sqlite.events.$inferInsert>();
    expectTypeOf<rows.AttemptRow>().toEqualTypeOf<typeof sqlite.deliveryAttempts.$inferSelect>();
    expectTypeOf<rows.NewAttemptRow>().toEqualTypeOf<typeof sqlite.deliveryAttempts.$inferInsert>();
    expectTypeOf<rows.ClientRow>().toEqualTypeOf<typeof sqlite.clients.$inferSelect>();
    expectTypeOf<rows.NewClientRow>().toEqualTypeOf<typeof sqlite.clients.$inferInsert>();
    expectTypeOf<rows.SessionRow>().toEqualTypeOf<typeof sqlite.dashboardSessions.$inferSelect>();
    expectTypeOf<rows.NewSessionRow>().toEqualTypeOf<typeof sqlite.dashboardSessions.$inferInsert>();
    expectTypeOf<rows.UpstreamAccountRow>().toEqualTypeOf<typeof sqlite.upstreamAccounts.$inferSelect>();
    expectTypeOf<rows.KeyHealthRow>().toEqualTypeOf<typeof sqlite.endpointHealth.$inferSelect>();
    expectTypeOf<rows.NoticeRow>().toEqualTypeOf<typeof sqlite.notices.$inferSelect>();
    expectTypeOf<rows.NewNoticeRow>().toEqualTypeOf<typeof sqlite.notices.$inferInsert>();
    expectTypeOf<rows.WebhookEndpointRow>().toEqualTypeOf<typeof sqlite.webhookEndpoints.$inferSelect>();
    expectTypeOf<rows.NewWebhookEndpointRow>().toEqualTypeOf<typeof sqlite.webhookEndpoints.$inferInsert>();
  });
});

describe("schema parity: SQLite and Postgres", () => {
  it("have the same row types (checked by tsc)", () => {
    // Every table at once: a table added to one schema only, or any column that differs in name,
    // type, nullability or default (optional on insert), fails here.
    expectTypeOf<Exclude<keyof PgSelect, PgOnlyTableKey>>().toEqualTypeOf<keyof LiteSelect>();
    expectTypeOf<Omit<PgSelect, PgOnlyTableKey>>().toEqualTypeOf<LiteSelect>();
    expectTypeOf<Omit<PgInsert, PgOnlyTableKey>>().toEqualTypeOf<LiteInsert>();

    // The same table by table, for readable errors: tsc names each table whose rows differ
    // ("Type '"tasks"' does not satisfy the constraint 'never'").
    noTable<Differing<PgSelect, LiteSelect>>();
    noTable<Differing<PgInsert, LiteInsert>>();
  });

  it("have the same tables, column names and index names", () => {
    const sqliteTables = new Map(tablesOf(sqlite).map((t) => [getTableName(t), sqliteTableConfig(t as never)]));
    const pgTables = new Map(tablesOf(pg).map((t) => [getTableName(t), pgTableConfig(t as never)]));

    expect([...pgTables.keys()].filter((n) => !PG_ONLY_TABLES.includes(n)).sort()).toEqual(
      [...sqliteTables.keys()].sort(),
    );
    for (const [name, lite] of sqliteTables) {
      const post = pgTables.get(name)!;
      const pgOnlyColumns: string[] = PG_ONLY_COLUMNS[name] ?? [];
      const pgColumns = post.columns.map((c) => c.name).filter((c) => !pgOnlyColumns.includes(c));
      expect(pgColumns, `columns of ${name}`).toEqual(lite.columns.map((c) => c.name));
      expect(
        post.columns
          .filter((c) => !pgOnlyColumns.includes(c.name))
          .map((c) => [c.name, c.primary, c.notNull, c.hasDefault]),
        `keys, nullability and defaults of ${name}`,
      ).toEqual(lite.columns.map((c) => [c.name, c.primary, c.notNull, c.hasDefault]));

      // Postgres may carry a SQLite unique index as a unique constraint (events_id_uq, see schema).
      const pgOnlyIndexes: string[] = PG_ONLY_INDEXES[name] ?? [];
      const pgIndexes = [
        ...post.indexes.map((i) => i.config.name ?? ""),
        ...post.uniqueConstraints.map((u) => u.getName() ?? ""),
      ]
        .filter((n) => !pgOnlyIndexes.includes(n))
        .sort();
      expect(pgIndexes, `indexes of ${name}`).toEqual(lite.indexes.map((i) => i.config.name).sort());
      expect(foreignKeysOf(post), `foreign keys of ${name}`).toEqual(foreignKeysOf(lite));
    }
  });

  it("a migrated SQLite database has the indexes of the SQLite schema, no more", () => {
    const database = openDatabase(":memory:");
    try {
      for (const table of tablesOf(sqlite)) {
        const name = getTableName(table);
        const declared = sqliteTableConfig(table as never).indexes.map((i) => i.config.name);
        const built = database.sqlite
          .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL")
          .pluck()
          .all(name);
        expect(built.sort(), `indexes of ${name}`).toEqual(declared.sort());
      }
    } finally {
      database.close();
    }
  });
});

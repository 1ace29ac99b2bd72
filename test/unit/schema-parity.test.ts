import { getTableName, is, Table } from "drizzle-orm";
import { getTableConfig as pgTableConfig } from "drizzle-orm/pg-core";
import { getTableConfig as sqliteTableConfig } from "drizzle-orm/sqlite-core";
import { describe, expect, expectTypeOf, it } from "vitest";
import * as pg from "../../src/db/pg/schema.js";
import * as sqlite from "../../src/db/sqlite/schema.js";
import type * as rows from "../../src/store/rows.js";

/**
 * The SQLite and Postgres schemas must describe the same rows: the same tables, the same column
 * names and the same `$inferSelect` / `$inferInsert` types. The type half is checked by
 * `tsc --noEmit -p tsconfig.json` (the first step of `npm test`; test/ is in that tsconfig), the
 * names at run time. Postgres-only tables and columns are declared in the lists below, on purpose
 * (see src/db/pg/schema.ts): account_leaders, the account leases of several processes (SQLite has one),
 * and delivery_keys, the per-key lock of several processes' event claims (SQLite's claims are one process's).
 * client_storage_log and client_storage_grants: stored bytes counted and decided without one row every
 * instance's writes wait on (SQLite has one writer).
 */
const PG_ONLY_TABLES: string[] = ["account_leaders", "delivery_keys", "client_storage_log", "client_storage_grants"];
const PG_ONLY_COLUMNS: Record<string, string[]> = {};
const PG_ONLY_INDEXES: Record<string, string[]> = {};
type PgOnlyTableKey = "accountLeaders" | "deliveryKeys" | "clientStorageLog" | "clientStorageGrants";

/** The exported tables of a schema module, each as its select or insert row type. */
type Rows<M, Kind extends "$inferSelect" | "$inferInsert"> = {
  [N in keyof M as M[N] extends Table ? N : never]: M[N] extends Record<Kind, infer R> ? R : never;
};
type PgSelect = Rows<typeof pg, "$inferSelect">;
type PgInsert = Rows<typeof pg, "$inferInsert">;
type LiteSelect = Rows<typeof sqlite, "$inferSelect">;
type LiteInsert = Rows<typeof sqlite, "$inferInsert">;

function tablesOf(mod: Record<string, unknown>): Table[] {
  return Object.values(mod).filter((v): v is Table => is(v, Table));
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

    // The same table by table, for readable errors.
    expectTypeOf<typeof pg.clients.$inferSelect>().toEqualTypeOf<typeof sqlite.clients.$inferSelect>();
    expectTypeOf<typeof pg.clients.$inferInsert>().toEqualTypeOf<typeof sqlite.clients.$inferInsert>();
    expectTypeOf<typeof pg.tasks.$inferSelect>().toEqualTypeOf<typeof sqlite.tasks.$inferSelect>();
    expectTypeOf<typeof pg.tasks.$inferInsert>().toEqualTypeOf<typeof sqlite.tasks.$inferInsert>();
    expectTypeOf<typeof pg.events.$inferSelect>().toEqualTypeOf<typeof sqlite.events.$inferSelect>();
    expectTypeOf<typeof pg.events.$inferInsert>().toEqualTypeOf<typeof sqlite.events.$inferInsert>();
    expectTypeOf<typeof pg.deliveryAttempts.$inferSelect>().toEqualTypeOf<
      typeof sqlite.deliveryAttempts.$inferSelect
    >();
    expectTypeOf<typeof pg.deliveryAttempts.$inferInsert>().toEqualTypeOf<
      typeof sqlite.deliveryAttempts.$inferInsert
    >();
    expectTypeOf<typeof pg.upstreamAccounts.$inferSelect>().toEqualTypeOf<
      typeof sqlite.upstreamAccounts.$inferSelect
    >();
    expectTypeOf<typeof pg.upstreamAccounts.$inferInsert>().toEqualTypeOf<
      typeof sqlite.upstreamAccounts.$inferInsert
    >();
    expectTypeOf<typeof pg.upstreamReads.$inferSelect>().toEqualTypeOf<typeof sqlite.upstreamReads.$inferSelect>();
    expectTypeOf<typeof pg.upstreamReads.$inferInsert>().toEqualTypeOf<typeof sqlite.upstreamReads.$inferInsert>();
    expectTypeOf<typeof pg.durationStats.$inferSelect>().toEqualTypeOf<typeof sqlite.durationStats.$inferSelect>();
    expectTypeOf<typeof pg.durationStats.$inferInsert>().toEqualTypeOf<typeof sqlite.durationStats.$inferInsert>();
    expectTypeOf<typeof pg.dashboardSessions.$inferSelect>().toEqualTypeOf<
      typeof sqlite.dashboardSessions.$inferSelect
    >();
    expectTypeOf<typeof pg.dashboardSessions.$inferInsert>().toEqualTypeOf<
      typeof sqlite.dashboardSessions.$inferInsert
    >();
    expectTypeOf<typeof pg.creditLedger.$inferSelect>().toEqualTypeOf<typeof sqlite.creditLedger.$inferSelect>();
    expectTypeOf<typeof pg.creditLedger.$inferInsert>().toEqualTypeOf<typeof sqlite.creditLedger.$inferInsert>();
    expectTypeOf<typeof pg.learnedPrices.$inferSelect>().toEqualTypeOf<typeof sqlite.learnedPrices.$inferSelect>();
    expectTypeOf<typeof pg.learnedPrices.$inferInsert>().toEqualTypeOf<typeof sqlite.learnedPrices.$inferInsert>();
    expectTypeOf<typeof pg.healthProbe.$inferSelect>().toEqualTypeOf<typeof sqlite.healthProbe.$inferSelect>();
    expectTypeOf<typeof pg.healthProbe.$inferInsert>().toEqualTypeOf<typeof sqlite.healthProbe.$inferInsert>();
    expectTypeOf<typeof pg.rateLimitHits.$inferSelect>().toEqualTypeOf<typeof sqlite.rateLimitHits.$inferSelect>();
    expectTypeOf<typeof pg.rateLimitHits.$inferInsert>().toEqualTypeOf<typeof sqlite.rateLimitHits.$inferInsert>();
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
      expect(
        post.foreignKeys
          .map(
            (fk) =>
              fk
                .reference()
                .columns.map((c) => c.name)
                .join(",") +
              "->" +
              getTableName(fk.reference().foreignTable),
          )
          .sort(),
        `foreign keys of ${name}`,
      ).toEqual(
        lite.foreignKeys
          .map(
            (fk) =>
              fk
                .reference()
                .columns.map((c) => c.name)
                .join(",") +
              "->" +
              getTableName(fk.reference().foreignTable),
          )
          .sort(),
      );
    }
  });
});

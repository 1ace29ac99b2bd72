import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, afterEach, beforeAll, inject } from "vitest";
import type { PgStore } from "../../src/db/pg/store.js";
import { pgStore } from "../../src/open-store.js";
import { withDatabase } from "../setup/postgres.js";

/**
 * A fresh, migrated PostgreSQL database for one test (a copy of the run's template database,
 * see test/setup/postgres.ts), and a way to drop it. Every connection must be closed before `drop`.
 */
export async function freshPgDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const adminUrl = inject("pgAdminUrl");
  const name = `genrelay_t_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name} TEMPLATE ${inject("pgTemplate")}`);
  await admin.end();
  return {
    url: withDatabase(adminUrl, name),
    async drop() {
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}

/**
 * For the calling test file: one fresh database (dropped after the file), an admin connection to
 * it, and `store()`, a store on it without migrating (a second process, say), closed after its test.
 */
export function pgDatabasePerFile(): { readonly url: string; readonly admin: pg.Client; store(): Promise<PgStore> } {
  let db: { url: string; drop: () => Promise<void> };
  let admin: pg.Client;
  const stores: PgStore[] = [];
  beforeAll(async () => {
    db = await freshPgDatabase();
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
  });
  afterAll(async () => {
    await admin.end();
    await db.drop();
  });
  return {
    get url() {
      return db.url;
    },
    get admin() {
      return admin;
    },
    async store() {
      const s = await pgStore(db.url, { migrate: false, max: 4 });
      stores.push(s);
      return s;
    },
  };
}

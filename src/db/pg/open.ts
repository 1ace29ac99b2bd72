import { drizzle } from "drizzle-orm/node-postgres";
import { migrate } from "drizzle-orm/node-postgres/migrator";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";

/** `migrations/pg/` sits three levels above both src/db/pg/ and dist/db/pg/. */
export const PG_MIGRATIONS_FOLDER = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "migrations", "pg");

/** Advisory lock key of migrations: instances starting together migrate one after the other. */
const MIGRATION_LOCK = 0x67_72_6d_69; // "grmi"

/**
 * Brings the database to the current schema. Safe when several instances start at once: each
 * takes the same session advisory lock on its own connection first, so one migrates while the
 * others wait, then find nothing left to do.
 */
export async function migratePostgres(connectionString: string): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
    try {
      await migrate(drizzle({ client }), { migrationsFolder: PG_MIGRATIONS_FOLDER });
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]);
    }
  } finally {
    await client.end();
  }
}

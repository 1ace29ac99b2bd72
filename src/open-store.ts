import type { Config } from "./config.js";
import { transitionRules } from "./core/transition.js";
import { openDatabase, type Database_ } from "./db/sqlite/open.js";
import { SqliteStore } from "./db/sqlite/store.js";
import { migratePostgres } from "./db/pg/open.js";
import { PgStore } from "./db/pg/store.js";
import type { Store } from "./store/store.js";

/** The store on an open SQLite database, with the core's transition rules. */
export function sqliteStore(database: Database_): SqliteStore {
  return new SqliteStore(database, transitionRules);
}

/** The store on a PostgreSQL database (DATABASE_URL), migrated first unless told not to. */
export async function pgStore(
  connectionString: string,
  options: { migrate?: boolean; max?: number } = {},
): Promise<PgStore> {
  if (options.migrate !== false) await migratePostgres(connectionString);
  return new PgStore({ connectionString, ...(options.max !== undefined ? { max: options.max } : {}) }, transitionRules);
}

/**
 * Opens (and migrates) the store the configuration names: PostgreSQL when DATABASE_URL is set
 * (shared by any number of instances), else the SQLite file at DATABASE_PATH.
 */
export async function openStore(
  config: Pick<Config, "databasePath" | "databaseUrl">,
  options: { migrate?: boolean } = {},
): Promise<Store> {
  if (config.databaseUrl) return pgStore(config.databaseUrl, options);
  return sqliteStore(openDatabase(config.databasePath, options));
}

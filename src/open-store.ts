import type { Config } from "./config.js";
import { transitionRules } from "./core/transition.js";
import { openDatabase, type Database_ } from "./db/open.js";
import { SqliteStore } from "./db/sqlite-store.js";
import type { Store } from "./store/store.js";

/** The store on an open SQLite database, with the core's transition rules. */
export function sqliteStore(database: Database_): SqliteStore {
  return new SqliteStore(database, transitionRules);
}

/** Opens (and migrates) the store the configuration names: the SQLite file at DATABASE_PATH. */
export async function openStore(config: Pick<Config, "databasePath">, options: { migrate?: boolean } = {}): Promise<Store> {
  return sqliteStore(openDatabase(config.databasePath, options));
}

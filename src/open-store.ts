import type { Config } from "./config.js";
import { transitionRules } from "./core/transition.js";
import { openDatabase, type Database_ } from "./db/sqlite/open.js";
import { SqliteStore } from "./db/sqlite/store.js";
import type { PgStore } from "./db/pg/store.js";
import { parsePgUrl } from "./db/pg/hosts.js";
import type { Store } from "./store/store.js";

/** The store on an open SQLite database, with the core's transition rules. */
export function sqliteStore(database: Database_): SqliteStore {
  return new SqliteStore(database, transitionRules);
}

/**
 * The store on a PostgreSQL database (DATABASE_URL), migrated first unless told not to. A URL of
 * several hosts (libpq's form) waits until one takes writes, up to `failoverTimeoutMs` while some
 * host does not answer, and the store keeps following the writable one (db/pg/failover.ts).
 */
export async function pgStore(
  connectionString: string,
  options: { migrate?: boolean; max?: number; failoverTimeoutMs?: number } = {},
): Promise<PgStore> {
  // The driver and the PostgreSQL store load here, not at every start: a SQLite relay never needs them (docs/architecture.md, "Loaded when configured").
  const [{ migratePostgres }, { PgStore }, { PgHosts }] = await Promise.all([
    import("./db/pg/open.js"),
    import("./db/pg/store.js"),
    import("./db/pg/failover.js"),
  ]);
  const address = parsePgUrl(connectionString);
  const hosts =
    address.hosts.length > 1
      ? new PgHosts(address, { failoverTimeoutMs: options.failoverTimeoutMs ?? 30_000 })
      : undefined;
  if (hosts) {
    try {
      await hosts.ready();
    } catch (err) {
      hosts.close();
      throw err;
    }
  }
  const migrateUrl = hosts?.writableHost ? address.urlFor(hosts.writableHost) : connectionString;
  if (options.migrate !== false) await migratePostgres(migrateUrl);
  return new PgStore(
    { connectionString, ...(hosts ? { hosts } : {}), ...(options.max !== undefined ? { max: options.max } : {}) },
    transitionRules,
  );
}

/**
 * Opens (and migrates) the store the configuration names: PostgreSQL when DATABASE_URL is set
 * (shared by any number of instances), else the SQLite file at DATABASE_PATH.
 */
export async function openStore(
  config: Pick<Config, "databasePath" | "databaseUrl"> & Partial<Pick<Config, "databaseFailoverTimeoutMs">>,
  options: { migrate?: boolean } = {},
): Promise<Store> {
  if (config.databaseUrl)
    return pgStore(config.databaseUrl, {
      ...options,
      ...(config.databaseFailoverTimeoutMs !== undefined
        ? { failoverTimeoutMs: config.databaseFailoverTimeoutMs }
        : {}),
    });
  // The server's store: WAL checkpoints on a worker thread, not on the event loop (db/sqlite/checkpointer.ts).
  return sqliteStore(openDatabase(config.databasePath, { ...options, checkpointOffThread: true }));
}

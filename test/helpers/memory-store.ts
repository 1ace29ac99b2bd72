import { openDatabase } from "../../src/db/sqlite/open.js";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import { sqliteStore } from "../../src/open-store.js";

/**
 * A ready store for any test: the SQLite driver on a fresh in-memory database with every migration
 * applied and the core's transition rules, the same SqliteStore the relay runs on (only the file is
 * missing, so nothing to clean up but `close`). Each call is a database of its own.
 */
export function memoryStore(): SqliteStore {
  return sqliteStore(openDatabase(":memory:"));
}

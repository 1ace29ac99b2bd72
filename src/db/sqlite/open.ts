import Database from "better-sqlite3";
import { drizzle, type BetterSQLite3Database } from "drizzle-orm/better-sqlite3";
import { migrate } from "drizzle-orm/better-sqlite3/migrator";
import { sql, type SQL } from "drizzle-orm";
import { SQLiteDialect } from "drizzle-orm/sqlite-core";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Checkpointer } from "./checkpointer.js";
import * as schema from "./schema.js";
import { bindSqliteArgs, bindsNothing } from "../kit/bound-values.js";
import { planOf } from "./bound-values.js";

export type Db = BetterSQLite3Database<typeof schema>;

export interface Database_ {
  db: Db;
  sqlite: Database.Database;
  /** The worker thread that checkpoints the WAL (openDatabase's `checkpointOffThread`), else null. */
  checkpointer: Checkpointer | null;
  close(): void;
}

/**
 * drizzle prepares every query anew; preparing costs more than running most of ours. Statements are
 * reusable, so keep the recent ones by SQL text (an LRU: `IN (…)` lists of varying length make
 * some texts one-off). drizzle switches a statement to raw mode for queries that map columns
 * itself and never back, so a reused statement is handed out with raw mode off.
 */
function cacheStatements(sqlite: Database.Database, size = 500): void {
  const prepare = sqlite.prepare.bind(sqlite);
  const cache = new Map<string, Database.Statement>();
  sqlite.prepare = ((source: string) => {
    let stmt = cache.get(source);
    if (stmt) {
      cache.delete(source);
      // drizzle turns raw mode on where it maps columns itself and never off: reset it for reuse.
      if (stmt.reader) stmt.raw(false);
    } else {
      stmt = checkValues(prepare(source), source);
      if (cache.size >= size) cache.delete(cache.keys().next().value!);
    }
    cache.set(source, stmt);
    return stmt;
  }) as typeof sqlite.prepare;
}

/**
 * Every value a statement binds goes through the store's value rules first (src/db/kit/bound-values.ts:
 * NUL refused where written and matching nothing where compared, whole numbers only, well-formed
 * text, bounded keys), the same rules PgStore's connections apply.
 */
function checkValues(stmt: Database.Statement, source: string): Database.Statement {
  const plan = planOf(source, "sqlite");
  if (bindsNothing(plan)) return stmt;
  const target = stmt as unknown as Record<"run" | "get" | "all" | "iterate", (...args: unknown[]) => unknown>;
  for (const method of ["run", "get", "all", "iterate"] as const) {
    const native = target[method];
    target[method] = function (this: unknown, ...args: unknown[]) {
      return native.apply(this, bindSqliteArgs(plan, args));
    };
  }
  return stmt;
}

/**
 * drizzle leaves a LIMIT of a negative number or NaN out of the statement, which on SQLite means no
 * limit at all and keeps the value from the rules above; every numeric limit is bound instead, so
 * a limit below 0 reads no rows and NaN is refused, as on PostgreSQL.
 */
const dialect = SQLiteDialect.prototype as unknown as { buildLimit?: (limit: unknown) => SQL | undefined };
if (typeof dialect.buildLimit !== "function")
  throw new Error("drizzle's SQLiteDialect.buildLimit moved: the store's LIMIT rule needs a new home");
dialect.buildLimit = (limit) =>
  typeof limit === "object" || typeof limit === "number" ? sql` limit ${limit}` : undefined;

/**
 * The database holds webhook secrets: a new file is created 0600 (and new folders 0700) before
 * SQLite opens it; SQLite gives its -wal and -shm files the database file's mode. An existing file
 * or folder is left as the operator set it.
 */
function createPrivately(path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  try {
    closeSync(openSync(path, "wx", 0o600));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
}

/** `migrations/` sits three levels above both src/db/sqlite/ and dist/db/sqlite/. */
export const MIGRATIONS_FOLDER = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "migrations");

/**
 * Opens (creating folder and file when needed) and migrates the database.
 * WAL lets the CLI and readers work beside the server; busy_timeout makes a concurrent
 * writer (the CLI while the server runs) wait instead of failing.
 */
export function openDatabase(
  path: string,
  options: { migrate?: boolean; checkpointOffThread?: boolean } = {},
): Database_ {
  if (path !== ":memory:" && !path.startsWith("file:")) createPrivately(path);
  const sqlite = new Database(path);
  sqlite.pragma("journal_mode = WAL");
  // FULL: a commit is on disk (WAL fsynced) before it returns, so a 201 survives even a power loss.
  sqlite.pragma("synchronous = FULL");
  sqlite.pragma("busy_timeout = 5000");
  sqlite.pragma("foreign_keys = ON");
  // A savepoint's journal in memory, not a file of the temp directory: past 64 KiB (a records unit's
  // pages) SQLite spilled it to a temp file, so most group commits created, wrote page by page and
  // unlinked one (docs/performance.md, delivery's thirteenth round). Whatever else SQLite would put
  // in a temp file (a sort past its cache, a transient index) stays in memory too: the relay makes
  // no TEMP tables and runs no VACUUM.
  sqlite.pragma("temp_store = MEMORY");
  cacheStatements(sqlite);
  const db = drizzle({ client: sqlite, schema });
  if (options.migrate !== false) migrate(db, { migrationsFolder: MIGRATIONS_FOLDER });
  // The server's connection leaves checkpoints to a worker thread (checkpointer.ts); a file only:
  // an in-memory database has no WAL and no second connection.
  const offThread = options.checkpointOffThread === true && path !== ":memory:" && !path.startsWith("file:");
  return {
    db,
    sqlite,
    checkpointer: offThread ? new Checkpointer(sqlite) : null,
    close: () => {
      if (sqlite.open) sqlite.close();
    },
  };
}

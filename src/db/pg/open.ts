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

/** Longest wait for a connection (a new one, or a free one from the pool) before the request fails (503). */
export const PG_CONNECT_TIMEOUT_MS = 5_000;
/** Longest a statement may run on the server; the client gives up a little later (a frozen server never answers). */
export const PG_STATEMENT_TIMEOUT_MS = 15_000;
const CLIENT_GRACE_MS = 5_000;
/**
 * Longest a transaction may sit idle on the server, waiting for its client, before the server ends
 * the session: a process frozen mid-transaction (SIGSTOP, a stalled event loop) would otherwise hold
 * its row locks, and every instance's writes to those rows, for as long as it stays frozen. The
 * relay's transactions never wait on anything but the database, for milliseconds.
 */
export const PG_IDLE_IN_TRANSACTION_MS = 10_000;

export interface PgLimits {
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
  /** The server-side name of every connection of one store (see INSTANCE_PREFIX). */
  applicationName?: string;
}

/**
 * Every connection of a PgStore carries `application_name` = this prefix and the store's own id,
 * so that the instance taking an account over from a frozen leader can end that leader's
 * sessions (leadership.ts), and an operator can tell the instances' sessions apart.
 */
export const INSTANCE_PREFIX = "genrelay-";

/**
 * Connection settings with bounded waits (docs/contract.md, "Acknowledged means stored"): a database that is down, frozen or out of
 * connections makes requests fail within these limits (503 storage_unavailable), never hang.
 */
export function pgClientConfig(connectionString: string, limits: PgLimits = {}): pg.ClientConfig {
  const statement = limits.statementTimeoutMs ?? PG_STATEMENT_TIMEOUT_MS;
  return {
    connectionString,
    connectionTimeoutMillis: limits.connectTimeoutMs ?? PG_CONNECT_TIMEOUT_MS,
    statement_timeout: statement,
    // Client side: a SIGSTOPped or unreachable server never sends the statement_timeout error.
    query_timeout: statement + CLIENT_GRACE_MS,
    idle_in_transaction_session_timeout: PG_IDLE_IN_TRANSACTION_MS,
    keepAlive: true,
    ...(limits.applicationName ? { application_name: limits.applicationName } : {}),
  };
}

/**
 * A pool whose connections never crash the process: node-postgres emits 'error' on a client whose
 * connection dies (server restart, network cut), and an 'error' event without a listener throws.
 * The pool listens on idle clients only; every client gets its own listener here, so a checked-out
 * one fails its query instead (and is thrown away when released with that error).
 */
export function newPgPool(config: pg.PoolConfig): pg.Pool {
  const pool = new pg.Pool(config);
  pool.on("error", () => {});
  pool.on("connect", (client) => {
    client.on("error", () => {});
  });
  return pool;
}

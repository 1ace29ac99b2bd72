import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";

/** SQLite result codes that mean the database cannot take writes now (disk full, I/O, locked out), not a bug. */
const SQLITE_UNAVAILABLE_CODES = /^SQLITE_(FULL|IOERR|READONLY|CANTOPEN|BUSY|LOCKED|NOMEM|CORRUPT|NOTADB|PROTOCOL)/;
/**
 * PostgreSQL's counterparts (SQLSTATE): connection exceptions (08), insufficient resources (53:
 * disk full, out of memory, too many connections), shutdown or start-up (57P01-57P05), a statement
 * cut off by statement_timeout (57014), an idle transaction timed out (25P03), system and I/O
 * errors (58), corrupted data (XX001, XX002), and a write refused as read-only (25006: a standby, or
 * a primary demoted by a failover, until the relay finds the new one).
 */
const PG_UNAVAILABLE_CODES = /^(08...|53...|57P0[1-5]|57014|25P03|25006|58...|XX00[12])$/;
/** Socket errors of the database connection (node-postgres passes them on as they are). */
const SOCKET_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ECONNABORTED",
]);
/** node-postgres's own errors for a lost, closed or timed-out connection carry no code, only these words. */
const PG_CONNECTION_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Client was closed and is not queryable|Cannot use a pool after calling end)/;

/**
 * Whether an error means the database cannot serve now (full, failing, unreachable, frozen, out of
 * connections), not a bug: such errors answer 503 storage_unavailable with Retry-After, never 500.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = e?.code;
  if (
    typeof code === "string" &&
    (SQLITE_UNAVAILABLE_CODES.test(code) || PG_UNAVAILABLE_CODES.test(code) || SOCKET_CODES.has(code))
  )
    return true;
  if (err instanceof Error && PG_CONNECTION_MESSAGES.test(err.message)) return true;
  // AggregateError (several addresses refused) and wrapped errors: the first cause decides.
  const cause = err instanceof AggregateError ? err.errors[0] : err instanceof Error ? err.cause : undefined;
  return cause !== undefined && cause !== err && isDatabaseUnavailable(cause);
}

/**
 * Whether an error is the unique index on (upstream_account, upstream_task_id) refusing a second
 * task bound to the same upstream id, on either driver.
 */
export function isUpstreamIdTaken(err: unknown): boolean {
  const e = err as { code?: unknown; constraint?: unknown; message?: unknown } | null;
  if (e?.code === "23505") return e.constraint === "tasks_upstream_task_uq";
  return (
    e?.code === "SQLITE_CONSTRAINT_UNIQUE" && typeof e.message === "string" && e.message.includes("upstream_task_id")
  );
}

/** How long after the last database failure the relay still reports itself unready. */
export const UNHEALTHY_FOR_MS = 10_000;
const LOG_EVERY_MS = 10_000;

/**
 * What the relay knows about its database: when a write last failed for lack of space or I/O. Every
 * failure is counted, but logged at most once per LOG_EVERY_MS with how many were suppressed (a full
 * disk under load would otherwise write a stack trace per request). /readyz is unready while
 * failures are recent; recovery is automatic: once writes work again, the failures stop.
 */
export class DatabaseHealth {
  private lastFailureAt = Number.NEGATIVE_INFINITY;
  private lastLogAt = Number.NEGATIVE_INFINITY;
  private suppressed = 0;

  constructor(
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {}

  failed(err: unknown, where: string): void {
    const now = this.clock.now();
    this.lastFailureAt = now;
    if (now - this.lastLogAt < LOG_EVERY_MS) {
      this.suppressed += 1;
      return;
    }
    const e = err as { code?: string; message?: string };
    this.logger.error(
      { code: e.code, error: e.message, where, suppressed: this.suppressed },
      "storage unavailable: writes are refused until it recovers",
    );
    this.lastLogAt = now;
    this.suppressed = 0;
  }

  /** Why the database is unhealthy now, or null (the words are /readyz's, unchanged). */
  problem(): string | null {
    const ago = this.clock.now() - this.lastFailureAt;
    return ago < UNHEALTHY_FOR_MS ? `storage writes failed ${Math.round(ago / 1000)} s ago` : null;
  }
}

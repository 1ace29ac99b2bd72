import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";

/** SQLite result codes that mean the database cannot take writes now (disk full, I/O, locked out), not a bug. */
const STORAGE_CODES = /^SQLITE_(FULL|IOERR|READONLY|CANTOPEN|BUSY|LOCKED|NOMEM|CORRUPT|NOTADB|PROTOCOL)/;

export function isStorageFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && STORAGE_CODES.test(code);
}

/** How long after the last storage failure the relay still reports itself unready. */
export const UNHEALTHY_FOR_MS = 10_000;
const LOG_EVERY_MS = 10_000;

/**
 * What the relay knows about its storage: when a write last failed for lack of space or I/O. Every
 * failure is counted, but logged at most once per LOG_EVERY_MS with how many were suppressed (a full
 * disk under load would otherwise write a stack trace per request). /readyz is unready while
 * failures are recent; recovery is automatic: once writes work again, the failures stop.
 */
export class StorageHealth {
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
    this.logger.error({ code: e.code, error: e.message, where, suppressed: this.suppressed }, "storage unavailable: writes are refused until it recovers");
    this.lastLogAt = now;
    this.suppressed = 0;
  }

  /** Why storage is unhealthy now, or null. */
  problem(): string | null {
    const ago = this.clock.now() - this.lastFailureAt;
    return ago < UNHEALTHY_FOR_MS ? `storage writes failed ${Math.round(ago / 1000)} s ago` : null;
  }
}

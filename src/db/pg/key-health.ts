import type { DeliveryKey, KeyHealthStore } from "../../store/store.js";
import type { KeyHealthRow } from "../../store/rows.js";
import type { PendingFailure, PgContext } from "./context.js";
import { checkNumber, checkWrittenText } from "../../store/values.js";
import { mapRow } from "./mapping.js";

/**
 * The KeyHealthStore on PostgreSQL (SQLite's is db/sqlite/key-health.ts): the health of delivery keys.
 * Rows come back with snake_case names and are mapped by their keys (mapRow).
 */
export function pgKeyHealth(s: PgContext): KeyHealthStore {
  const { q, pool } = s;
  return {
    recordFailure: async (key, now, error) => {
      // An attempt's failure, queued in the turn its record was: written by the records' statement
      // (PgStore.flushAttempts), in its transaction, not by a commit of its own.
      if (s.attempts.length > 0) {
        await new Promise<void>((resolve, reject) =>
          s.failures.push({ clientId: key.clientId, host: key.host, now, error, resolve, reject }),
        );
        return;
      }
      const values: unknown[] = [];
      await q(
        `WITH ${failuresUpsert([{ clientId: key.clientId, host: key.host, now, error }], values)} SELECT 1`,
        values,
      );
    },
    recordSuccess: async (key, now) => {
      // The old values come from the row as it was before this statement (the FROM self-join's snapshot).
      const rows = await q(
        `UPDATE endpoint_health e SET failing_since = NULL, failed_attempts = 0, notice_sent_at = NULL, last_success_at = $3, updated_at = $3
         FROM endpoint_health old WHERE e.client_id = $1 AND e.host = $2 AND old.client_id = e.client_id AND old.host = e.host
           AND e.failing_since IS NOT NULL
         RETURNING old.failing_since, old.notice_sent_at`,
        [key.clientId, key.host, now],
      );
      const r = rows[0];
      return r
        ? {
            failingSince: Number(r.failing_since),
            noticeSentAt: r.notice_sent_at === null ? null : Number(r.notice_sent_at),
          }
        : null;
    },
    dueForNotice: async (before, limit) =>
      (
        await q(
          `SELECT e.* FROM endpoint_health e JOIN clients c ON c.id = e.client_id
           WHERE e.failing_since <= $1 AND e.notice_sent_at IS NULL AND c.notification_url IS NOT NULL AND c.revoked_at IS NULL
           ORDER BY e.failing_since LIMIT $2`,
          [before, limit],
        )
      ).map((r) => mapRow<KeyHealthRow>(r)),
    markNoticed: async (key: DeliveryKey, failingSince, at) =>
      (
        await pool.query(
          "UPDATE endpoint_health SET notice_sent_at = $4 WHERE client_id = $1 AND host = $2 AND failing_since = $3 AND notice_sent_at IS NULL",
          [key.clientId, key.host, failingSince, at],
        )
      ).rowCount === 1,
    failingOf: async (clientId) =>
      (
        await q(
          "SELECT * FROM endpoint_health WHERE client_id = $1 AND failing_since IS NOT NULL ORDER BY failing_since",
          [clientId],
        )
      ).map((r) => mapRow<KeyHealthRow>(r)),
  };
}

/** What the upsert needs of a failed attempt. */
type FailedAttempt = Pick<PendingFailure, "clientId" | "host" | "now" | "error">;

/**
 * The CTE that counts failed attempts in endpoint_health, one row per key (summed here in the order
 * they came: the first failure's time opens a run, the last one's error and time are kept); its
 * values are pushed on `values`. The one statement that counts a failure, written alone
 * (recordFailure) or riding the turn's attempts' statement (PgStore.writeAttempts).
 */
export function failuresUpsert(failures: readonly FailedAttempt[], values: unknown[]): string {
  type Sum = { clientId: string; host: string; since: number; n: number; error: string | null; at: number };
  const byKey = new Map<string, Sum>();
  for (const raw of failures) {
    // The store's value rules, as a bound parameter of each column would get them (unnest's arrays
    // hide the elements from them): a NUL, a key past MAX_KEY_BYTES or an unsafe number throws.
    const f = {
      clientId: checkWrittenText(raw.clientId, "client_id", true),
      host: checkWrittenText(raw.host, "host", true),
      now: checkNumber(raw.now, "write"),
      error: raw.error === null ? null : checkWrittenText(raw.error, "last_error"),
    };
    const key = `${f.clientId}|${f.host}`;
    const k = byKey.get(key);
    if (k) Object.assign(k, { n: k.n + 1, error: f.error, at: f.now });
    else byKey.set(key, { clientId: f.clientId, host: f.host, since: f.now, n: 1, error: f.error, at: f.now });
  }
  const rows = [...byKey.values()];
  const p = (column: (r: Sum) => unknown, type: string) => `$${values.push(rows.map(column))}::${type}[]`;
  return `h AS (INSERT INTO endpoint_health (client_id, host, failing_since, failed_attempts, last_error, updated_at)
      SELECT * FROM unnest(${p((r) => r.clientId, "text")}, ${p((r) => r.host, "text")}, ${p((r) => r.since, "bigint")},
        ${p((r) => r.n, "bigint")}, ${p((r) => r.error, "text")}, ${p((r) => r.at, "bigint")})
      ON CONFLICT (client_id, host) DO UPDATE SET failing_since = coalesce(endpoint_health.failing_since, excluded.failing_since),
        failed_attempts = endpoint_health.failed_attempts + excluded.failed_attempts, last_error = excluded.last_error,
        updated_at = excluded.updated_at)`;
}

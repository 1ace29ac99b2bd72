import type { DeliveryKey, KeyHealthStore } from "../../store/store.js";
import type { KeyHealthRow } from "../../store/rows.js";
import type { PgContext } from "./context.js";
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
      await q(
        `INSERT INTO endpoint_health (client_id, host, failing_since, failed_attempts, last_error, updated_at) VALUES ($1, $2, $3, 1, $4, $3)
         ON CONFLICT (client_id, host) DO UPDATE SET failing_since = coalesce(endpoint_health.failing_since, $3),
           failed_attempts = endpoint_health.failed_attempts + 1, last_error = $4, updated_at = $3`,
        [key.clientId, key.host, now, error],
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

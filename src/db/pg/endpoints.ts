import type { DeliveryKey, EndpointHealthRow, EndpointStore, NoticeRow, NoticeStore } from "../../store/store.js";
import { pickWithinRoom } from "../../store/fairness.js";
import type { Row } from "./mapping.js";
import type { PgContext } from "./context.js";

/**
 * The endpoint-health and notice operations on PostgreSQL (the SQLite ones are in ../endpoints.ts).
 * Rows come back with snake_case names and are mapped by the column list below.
 */

const camel = (name: string) => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function mapRow<T>(raw: Row): T {
  const out: Row = {};
  for (const [name, value] of Object.entries(raw)) out[camel(name)] = value;
  return out as T;
}

export function pgEndpointStore(s: PgContext): EndpointStore {
  const { q, pool } = s;
  return {
    recordFailure: async (key, now, error) => {
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
      ).map((r) => mapRow<EndpointHealthRow>(r)),
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
      ).map((r) => mapRow<EndpointHealthRow>(r)),
  };
}

const CLAIMABLE =
  "delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)";
/** How far past `limit` a claim looks for other clients' notices when the first ones are over their client's room. */
const NOTICE_SCAN_FACTOR = 4;

export function pgNoticeStore(s: PgContext, notify: () => Promise<void>): NoticeStore {
  const { q, pool } = s;
  return {
    insert: async (row) => {
      const entries = Object.entries(row).filter(([, v]) => v !== undefined);
      await q(
        `INSERT INTO notices (${entries.map(([k]) => snake(k)).join(", ")}) VALUES (${entries.map((_, i) => `$${i + 1}`).join(", ")})`,
        entries.map(([, v]) => v),
      );
      await notify();
    },
    claimDue: async (o) => {
      if (o.limit <= 0) return [];
      if (!o.clientRoom) {
        const rows = await q(
          `UPDATE notices SET claimed_until = $2, claim_token = $3
           WHERE id IN (SELECT id FROM notices WHERE ${CLAIMABLE} ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
           RETURNING *`,
          [o.now, o.now + o.leaseMs, o.token, o.limit],
        );
        return rows.map((r) => mapRow<NoticeRow>(r));
      }
      // Within each client's room (the notifier's fair pool): a window of the oldest due notices of
      // clients not left out, picked in turns (as SQLite's claimDueNotices), then claimed where still claimable.
      const candidates = await q(
        `SELECT id, client_id FROM notices WHERE ${CLAIMABLE} AND NOT (client_id = ANY($2::text[])) ORDER BY next_attempt_at, id LIMIT $3`,
        [o.now, o.excludeClients ?? [], o.limit * NOTICE_SCAN_FACTOR],
      );
      const picked = pickWithinRoom(
        candidates.map((c) => ({ id: c.id as string, clientId: c.client_id as string, host: "" })),
        o.limit,
        () => Infinity,
        o.clientRoom,
      ).map((c) => c.id);
      if (picked.length === 0) return [];
      const rows = await q(
        `UPDATE notices SET claimed_until = $2, claim_token = $3
         WHERE id IN (SELECT id FROM notices WHERE id = ANY($4::text[]) AND ${CLAIMABLE} FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [o.now, o.now + o.leaseMs, o.token, picked],
      );
      return rows
        .map((r) => mapRow<NoticeRow>(r))
        .sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || (a.id < b.id ? -1 : 1));
    },
    record: async (id, token, patch) => {
      const entries = Object.entries({ ...patch, claimedUntil: null, claimToken: null }).filter(
        ([, v]) => v !== undefined,
      );
      await q(
        `UPDATE notices SET ${entries.map(([k], i) => `${snake(k)} = $${i + 3}`).join(", ")} WHERE id = $1 AND claim_token = $2`,
        [id, token, ...entries.map(([, v]) => v)],
      );
    },
    nextDueAt: async (now) => {
      // As SQLite's nextNoticeDueAt: the earliest unleased notice, or a lease's end when sooner.
      const r = (
        await q(
          `SELECT (SELECT next_attempt_at FROM notices WHERE delivery_status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1)
                   ORDER BY next_attempt_at LIMIT 1) AS at,
                  (SELECT min(claimed_until) FROM notices WHERE delivery_status = 'pending' AND claimed_until >= $1) AS until`,
          [now],
        )
      )[0]!;
      const times = [r.at, r.until].filter((t) => t !== null && t !== undefined).map(Number);
      return times.length === 0 ? null : Math.min(...times);
    },
    prune: async (before, batch) =>
      (
        await pool.query(
          "DELETE FROM notices WHERE id IN (SELECT id FROM notices WHERE created_at < $1 AND delivery_status <> 'pending' LIMIT $2)",
          [before, batch],
        )
      ).rowCount ?? 0,
    ofClient: async (clientId, limit) =>
      (
        await q("SELECT * FROM notices WHERE client_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2", [
          clientId,
          limit,
        ])
      ).map((r) => mapRow<NoticeRow>(r)),
  };
}

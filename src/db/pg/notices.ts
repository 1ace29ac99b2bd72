import { pickWithinRoom } from "../../store/fairness.js";
import type { NoticeStore } from "../../store/store.js";
import type { NoticeRow } from "../../store/rows.js";
import type { PgContext } from "./context.js";
import { NOTICE_SCAN_FACTOR } from "../kit/claim-window.js";
import { mapRow, snake } from "./mapping.js";
import { noticesInDueOrder } from "../kit/claim-order.js";

/**
 * The NoticeStore on PostgreSQL (SQLite's is db/sqlite/notices.ts): operational notices and their outbox.
 * Rows come back with snake_case names and are mapped by their keys (mapRow).
 */

const CLAIMABLE =
  "delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)";

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
      // clients not left out, picked in turns (as SQLite's claimDue in db/sqlite/notices.ts), then claimed where still claimable.
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
      return noticesInDueOrder(rows.map((r) => mapRow<NoticeRow>(r)));
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
      // As SQLite's nextDueAt (db/sqlite/notices.ts): the earliest unleased notice, or a lease's end when sooner.
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

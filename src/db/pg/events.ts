import type { EventRow, EventStore } from "../../store/store.js";
import { E, A, RELEASED, CHANNEL, EVENT_CLAIM_LOCK, opt } from "./mapping.js";
import { deliveryKey } from "../../store/delivery-key.js";
import { retryingEvent } from "../dashboard.js";
import { pickWithinRoom } from "../../store/fairness.js";
import type { PgStore } from "./pg-store.js";

/** The EventStore on PostgreSQL: the outbox, claims under the per-key cap, attempts, trials, re-queues and the feed. */
export function pgEvents(s: PgStore): EventStore {
  const { q, one } = s;
  return {
    // One claim at a time across every instance (a transaction-scoped advisory lock): the leased
    // count per key and the claim that relies on it must not interleave with another instance's,
    // or two claims could each take the whole per-key cap.
    claimDue: async (o) => {
      if (o.limit <= 0) return [];
      const claimable = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
        AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.delivery_status = 'pending')`;
      const candidates = await q(
        `SELECT seq, client_id, destination_host FROM events WHERE ${claimable}
           AND NOT ((client_id || '|' || destination_host) = ANY($2::text[])) AND NOT (client_id = ANY($4::text[]))
         ORDER BY next_attempt_at, seq LIMIT $3`,
        [o.now, o.excludeKeys, o.limit * 4, o.excludeClients ?? []],
      );
      if (candidates.length === 0) return [];
      const rows = await s.tx(async (c) => {
        await c.query("SELECT pg_advisory_xact_lock($1, 1)", [EVENT_CLAIM_LOCK]);
        // What every instance has in flight per key: leased events count against the shared cap
        // (looked up per key through events_key_due_idx, not by scanning every pending event).
        const pairs = [...new Map(candidates.map((c0) => [deliveryKey(c0.client_id as string, c0.destination_host as string), c0])).values()];
        const leased = new Map<string, number>();
        for (const r of await q(
          `SELECT client_id, destination_host, count(*) AS n FROM events
           WHERE (client_id, destination_host) IN (SELECT * FROM unnest($2::text[], $3::text[]))
             AND delivery_status = 'pending' AND claimed_until >= $1 GROUP BY 1, 2`,
          [o.now, pairs.map((p0) => p0.client_id), pairs.map((p0) => p0.destination_host)],
          c,
        )) {
          leased.set(deliveryKey(r.client_id as string, r.destination_host as string), Number(r.n));
        }
        const picked = pickWithinRoom(
          candidates.map((c0) => ({ seq: Number(c0.seq), clientId: c0.client_id as string, host: c0.destination_host as string })),
          o.limit,
          (key) => Math.min(o.keyRoom(key), o.maxPerKey - (leased.get(key) ?? 0)),
          o.clientRoom,
        ).map((c0) => c0.seq);
        if (picked.length === 0) return [];
        return q(
          `UPDATE events SET claimed_until = $3, claim_token = $4
           WHERE seq IN (SELECT seq FROM events WHERE seq = ANY($2::bigint[]) AND ${claimable} FOR UPDATE SKIP LOCKED)
           RETURNING *`,
          [o.now, picked, o.now + o.leaseMs, o.token],
          c,
        );
      });
      return E.rows(rows).sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
    },
    nextDueAt: async (o) => {
      const rows = await q(
        `SELECT next_attempt_at AS at, client_id, client_id || '|' || destination_host AS key FROM events
         WHERE delivery_status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1) ORDER BY next_attempt_at LIMIT 200`,
        [o.now],
      );
      if (rows.length === 0) return null;
      const excluded = new Set(o.excludeKeys);
      const clientsOut = new Set(o.excludeClients ?? []);
      for (const r of rows) if (!excluded.has(r.key as string) && !clientsOut.has(r.client_id as string)) return Number(r.at);
      return rows.length < 200 ? null : o.now + 1_000;
    },
    recordAttempt: (eventId, token, attempt, patch) =>
      new Promise<void>((resolve, reject) => {
        s.attempts.push({ eventId, token, attempt, patch, resolve, reject });
        if (s.attempts.length === 1) setImmediate(() => void s.flushAttempts());
      }),
    release: async (eventId, token, patch) => {
      await s.updateLeasedEvent(s.pool, eventId, token, { ...patch, ...RELEASED });
    },
    postponeKey: async (clientId, host, until, now) =>
      (
        await s.pool.query(
          `UPDATE events SET next_attempt_at = $3 WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'
             AND next_attempt_at < $3 AND (claimed_until IS NULL OR claimed_until < $4)`,
          [clientId, host, until, now],
        )
      ).rowCount ?? 0,
    claimTrial: async (key, o) => {
      const claimable = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
        AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.delivery_status = 'pending')`;
      const r = await one(
        `UPDATE events SET claimed_until = $4, claim_token = $5
         WHERE seq = (SELECT seq FROM events WHERE client_id = $2 AND destination_host = $3 AND ${claimable}
                      ORDER BY (attempts = 0), next_attempt_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token],
      );
      return opt(E, r);
    },
    claimOfKey: async (key, o) => {
      if (o.limit <= 0) return [];
      const claimable = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
        AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.delivery_status = 'pending')`;
      // Under the claims' advisory lock, as claimDue: the key's leased count across every instance bounds the claim.
      const rows = await s.tx(async (c) => {
        await c.query("SELECT pg_advisory_xact_lock($1, 1)", [EVENT_CLAIM_LOCK]);
        const leased = Number(
          (await one("SELECT count(*) AS n FROM events WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending' AND claimed_until >= $3", [key.clientId, key.host, o.now], c))!.n,
        );
        const limit = Math.min(o.limit, o.maxPerKey - leased);
        if (limit <= 0) return [];
        return q(
          `UPDATE events SET claimed_until = $4, claim_token = $5
           WHERE seq IN (SELECT seq FROM events WHERE client_id = $2 AND destination_host = $3 AND ${claimable}
                         ORDER BY next_attempt_at, seq LIMIT $6 FOR UPDATE SKIP LOCKED)
           RETURNING *`,
          [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token, limit],
          c,
        );
      });
      return E.rows(rows).sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
    },
    retryKeyNow: async (key, now) => {
      const n =
        (
          await s.pool.query(
            `UPDATE events SET next_attempt_at = $3 WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'
               AND (claimed_until IS NULL OR claimed_until < $3)`,
            [key.clientId, key.host, now],
          )
        ).rowCount ?? 0;
      if (n > 0) await s.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
      return n;
    },
    pendingOfKey: async (key) =>
      Number((await one("SELECT count(*) AS n FROM events WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'", [key.clientId, key.host]))!.n),
    requeueLastOfTask: (taskId, round) =>
      s.tx(async (c) => {
        const last = await one("SELECT id FROM events WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1 FOR UPDATE", [taskId], c);
        if (!last) return undefined;
        const set = E.set(round, 2);
        const r = await one(`UPDATE events SET ${set.sql} WHERE id = $1 RETURNING *`, [last.id, ...set.values], c);
        await q("SELECT pg_notify($1, 'dispatcher')", [CHANNEL], c);
        return opt(E, r);
      }),
    requeueFailed: async (clientId, since, round) => {
      const set = E.set(round, 3);
      const n =
        (await s.pool.query(`UPDATE events SET ${set.sql} WHERE client_id = $1 AND delivery_status = 'failed' AND created_at >= $2`, [clientId, since, ...set.values])).rowCount ?? 0;
      if (n > 0) await s.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
      return n;
    },
    retryingOfClient: async (clientId) => Number((await one(`SELECT count(*) AS n FROM events e WHERE e.client_id = $1 AND ${retryingEvent("e")}`, [clientId]))!.n),
    find: async (id) => opt(E, await one("SELECT * FROM events WHERE id = $1", [id])),
    lastOfTask: async (taskId) => opt(E, await one("SELECT * FROM events WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1", [taskId])),
    lastOfTasks: async (taskIds) => {
      const map = new Map<string, EventRow>();
      if (taskIds.length === 0) return map;
      for (const r of E.rows(await q("SELECT DISTINCT ON (task_id) * FROM events WHERE task_id = ANY($1::text[]) ORDER BY task_id, sequence DESC", [taskIds]))) map.set(r.taskId, r);
      return map;
    },
    ofTask: async (taskId) => E.rows(await q("SELECT * FROM events WHERE task_id = $1 ORDER BY sequence", [taskId])),
    attemptsOfTask: async (taskId) => A.rows(await q("SELECT * FROM delivery_attempts WHERE task_id = $1 ORDER BY attempted_at, id", [taskId])),
    feed: async (clientId, afterPos, limit) => E.rows(await q("SELECT * FROM events WHERE client_id = $1 AND client_seq > $2 ORDER BY client_seq LIMIT $3", [clientId, afterPos, limit])),
    clientSeqAtOrBefore: async (clientId, seq) => Number((await one("SELECT coalesce(max(client_seq), 0) AS pos FROM events WHERE client_id = $1 AND seq <= $2", [clientId, seq]))!.pos),
  };
}

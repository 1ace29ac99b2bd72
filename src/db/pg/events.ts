import type { EventStore } from "../../store/store.js";
import type { EventRow } from "../../store/rows.js";
import { E, A, RELEASED, CHANNEL, opt } from "./mapping.js";
import { retryingEvent } from "../kit/delivery-failing.js";
import type { PgContext } from "./context.js";
import { pgEventClaims } from "./event-claims.js";
import { placeInFeed } from "./feed-positions.js";

/** The EventStore on PostgreSQL: the outbox, attempts, re-queues and the feed; the claims are event-claims.ts. */
export function pgEvents(s: PgContext): EventStore {
  const { q, one } = s;
  return {
    ...pgEventClaims(s),
    nextDueAt: async (o) => {
      const rows = await q(
        `SELECT next_attempt_at AS at, client_id, client_id || '|' || destination_host AS key FROM events
         WHERE delivery_status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1) ORDER BY next_attempt_at LIMIT 200`,
        [o.now],
      );
      if (rows.length === 0) return null;
      const excluded = new Set(o.excludeKeys);
      const clientsOut = new Set(o.excludeClients ?? []);
      for (const r of rows)
        if (!excluded.has(r.key as string) && !clientsOut.has(r.client_id as string)) return Number(r.at);
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
      Number(
        (await one(
          "SELECT count(*) AS n FROM events WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'",
          [key.clientId, key.host],
        ))!.n,
      ),
    requeueLastOfTask: async (taskId, round) => {
      return s.tx(async (c) => {
        const last = await one(
          "SELECT id FROM events WHERE task_id = $1 AND endpoint_id IS NULL ORDER BY sequence DESC LIMIT 1 FOR UPDATE",
          [taskId],
          c,
        );
        if (!last) return undefined;
        const set = E.set(round, 2);
        const r = await one(`UPDATE events SET ${set.sql} WHERE id = $1 RETURNING *`, [last.id, ...set.values], c);
        await q("SELECT pg_notify($1, 'dispatcher')", [CHANNEL], c);
        return opt(E, r);
      });
    },
    requeueFailed: async (clientId, since, round) => {
      const set = E.set(round, 3);
      const n =
        (
          await s.pool.query(
            `UPDATE events SET ${set.sql} WHERE client_id = $1 AND delivery_status = 'failed' AND created_at >= $2`,
            [clientId, since, ...set.values],
          )
        ).rowCount ?? 0;
      if (n > 0) await s.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
      return n;
    },
    retryingOfClient: async (clientId) =>
      Number(
        (await one(`SELECT count(*) AS n FROM events e WHERE e.client_id = $1 AND ${retryingEvent("e")}`, [clientId]))!
          .n,
      ),
    find: async (id) => opt(E, await one("SELECT * FROM events WHERE id = $1", [id])),
    lastOfTask: async (taskId) =>
      opt(
        E,
        await one("SELECT * FROM events WHERE task_id = $1 AND endpoint_id IS NULL ORDER BY sequence DESC LIMIT 1", [
          taskId,
        ]),
      ),
    lastOfTasks: async (taskIds) => {
      const map = new Map<string, EventRow>();
      if (taskIds.length === 0) return map;
      for (const r of E.rows(
        await q(
          "SELECT DISTINCT ON (task_id) * FROM events WHERE task_id = ANY($1::text[]) AND endpoint_id IS NULL ORDER BY task_id, sequence DESC",
          [taskIds],
        ),
      ))
        map.set(r.taskId, r);
      return map;
    },
    ofTask: async (taskId) => E.rows(await q("SELECT * FROM events WHERE task_id = $1 ORDER BY sequence", [taskId])),
    attemptsOfTask: async (taskId) =>
      A.rows(await q("SELECT * FROM delivery_attempts WHERE task_id = $1 ORDER BY attempted_at, id", [taskId])),
    attemptCounts: async (eventIds) => {
      if (eventIds.length === 0) return new Map();
      const rows = await q(
        "SELECT event_id, count(*) AS n FROM delivery_attempts WHERE event_id = ANY($1::text[]) GROUP BY event_id",
        [eventIds],
      );
      return new Map(rows.map((r) => [r.event_id as string, Number(r.n)]));
    },
    feed: async (clientId, afterPos, limit) => {
      await placeInFeed(s, clientId, limit);
      return E.rows(
        await q("SELECT * FROM events WHERE client_id = $1 AND client_seq > $2 ORDER BY client_seq LIMIT $3", [
          clientId,
          afterPos,
          limit,
        ]),
      );
    },
    clientSeqAtOrBefore: async (clientId, seq) => {
      await placeInFeed(s, clientId, 1_000);
      return Number(
        (await one("SELECT coalesce(max(client_seq), 0) AS pos FROM events WHERE client_id = $1 AND seq <= $2", [
          clientId,
          seq,
        ]))!.pos,
      );
    },
  };
}

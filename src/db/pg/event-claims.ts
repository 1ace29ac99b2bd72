import type { EventStore } from "../../store/store.js";
import { E, opt, type Row } from "./mapping.js";
import { claimedOf, claimStatement } from "./claim-session.js";
import { deliveryKey } from "../../store/delivery-key.js";
import { pickWithinRoom } from "../../store/fairness.js";
import type { PgContext } from "./context.js";
import { eventsInDueOrder } from "../kit/claim-order.js";

/**
 * An event that may be claimed at `$1` (now): pending, due, unleased, and no earlier event of its
 * task pending (each task's events go out in order). The task check is a probe of
 * events_task_seq_idx per row looked at: OFFSET 0 keeps the planner from turning it into an
 * anti-join over every pending event, which it sorts whole before taking the first few (14 ms
 * with a 5,000-event backlog, against 0.1 ms for an index walk that stops at the limit).
 */
const CLAIMABLE = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
  AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.endpoint_id IS NOT DISTINCT FROM events.endpoint_id AND e2.delivery_status = 'pending' OFFSET 0)`;

/** How many due events a claim looks at per event it may take: the first ones in due order, ordered by (due time, seq) among themselves. */
const WINDOW_PER_EVENT = 4;

/**
 * A key's refill (claimOfKey): its first claimable events in due order, found by walking
 * events_key_due_idx. The walk locks a window of the first $7 events in the index's order (due
 * time, then the row's place), skipping rows another transaction holds; the window is ordered by
 * (due time, seq) and the first ones within the room are leased (the rest are unlocked at the
 * statement's end). Ties in due time beyond the window may go out of seq order; due order and each
 * task's order always hold.
 * $1 now, $2 client, $3 host, $4 lease end, $5 token, $6 limit, $7 window.
 *
 * Not counted, $6 is the key's room (its leases are known to the claims' session). Counted, the
 * key's leased events are counted first and bound the room ($8 maxPerKey less them), and the
 * answer says how many there are and how many of them are this store's (among $9, its tokens).
 */
const claimOfKey = (counted: boolean) => {
  const claim = `picked AS (
      SELECT seq FROM (
          SELECT seq, next_attempt_at FROM events WHERE client_id = $2 AND destination_host = $3 AND ${CLAIMABLE}
          ORDER BY next_attempt_at LIMIT $7 FOR UPDATE SKIP LOCKED) window_
      ORDER BY next_attempt_at, seq LIMIT ${counted ? "greatest(0, least($6, $8 - (SELECT n FROM leased)))" : "$6"}),
    claimed AS (UPDATE events SET claimed_until = $4, claim_token = $5 WHERE seq = ANY(ARRAY(SELECT seq FROM picked)) RETURNING *)`;
  if (!counted) return { name: "genrelay_claim_of_key", text: claimStatement(claim) };
  const leased = `leased AS (
      SELECT count(*) AS n, count(*) FILTER (WHERE claim_token = ANY($9::text[])) AS own FROM events
      WHERE client_id = $2 AND destination_host = $3 AND delivery_status = 'pending' AND claimed_until >= $1),
    `;
  return {
    name: "genrelay_claim_of_key_counted",
    text: claimStatement(leased + claim, "l.n AS leased, l.own AS own_leased, ", "leased l"),
  };
};
const CLAIM_OF_KEY = claimOfKey(false);
const CLAIM_OF_KEY_COUNTED = claimOfKey(true);

/** Leased events of keys ($2 clients, $3 hosts), and how many of them are this store's ($4 its tokens), at $1. */
const LEASED_OF_KEYS = `SELECT k.client_id, k.destination_host, l.n, l.own FROM unnest($2::text[], $3::text[]) AS k(client_id, destination_host)
  CROSS JOIN LATERAL (SELECT count(*) AS n, count(*) FILTER (WHERE e.claim_token = ANY($4::text[])) AS own FROM events e
    WHERE e.client_id = k.client_id AND e.destination_host = k.destination_host AND e.delivery_status = 'pending' AND e.claimed_until >= $1) l`;

/** The claim side of the EventStore on PostgreSQL: due events under the per-key cap, a key's refill and its trial. */
export function pgEventClaims(s: PgContext): Pick<EventStore, "claimDue" | "claimTrial" | "claimOfKey"> {
  const { q } = s;
  // Every claim runs through it: under the claims' lock, which it keeps between claims (see claim-session.ts).
  const session = s.claims;
  return {
    claimDue: async (o) => {
      if (o.limit <= 0) return [];
      // A window of the first due events in the due index's order, ordered by (due time, seq) here;
      // read before the claims' lock is taken (it walks past the backlogs of the keys left out).
      const candidates = (
        await q(
          `SELECT seq, client_id, destination_host, next_attempt_at FROM events WHERE ${CLAIMABLE}
             AND NOT ((client_id || '|' || destination_host) = ANY($2::text[])) AND NOT (client_id = ANY($4::text[]))
           ORDER BY next_attempt_at LIMIT $3`,
          [o.now, o.excludeKeys, o.limit * WINDOW_PER_EVENT, o.excludeClients ?? []],
        )
      ).sort((a, b) => Number(a.next_attempt_at) - Number(b.next_attempt_at) || Number(a.seq) - Number(b.seq));
      if (candidates.length === 0) return [];
      return session.run(async (c) => {
        // What every instance has in flight per key counts against the shared cap: counted per key
        // (through events_key_due_idx) unless this tenure knows it.
        const keys = new Map(
          candidates.map((c0) => [deliveryKey(c0.client_id as string, c0.destination_host as string), c0]),
        );
        const leased = new Map<string, number>();
        for (const key of keys.keys()) {
          const known = session.knownLeased(key, o.now);
          if (known !== undefined) leased.set(key, known);
        }
        const uncounted = [...keys].filter(([key]) => !leased.has(key)).map(([, c0]) => c0);
        if (uncounted.length > 0) {
          const own = session.ownOf(null, o.now);
          for (const r of await q(
            LEASED_OF_KEYS,
            [o.now, uncounted.map((p0) => p0.client_id), uncounted.map((p0) => p0.destination_host), own],
            c,
          )) {
            const key = deliveryKey(r.client_id as string, r.destination_host as string);
            leased.set(key, Number(r.n));
            session.counted(key, Number(r.n), Number(r.own));
          }
        }
        const picked = pickWithinRoom(
          candidates.map((c0) => ({
            seq: Number(c0.seq),
            clientId: c0.client_id as string,
            host: c0.destination_host as string,
          })),
          o.limit,
          (key) => Math.min(o.keyRoom(key), o.maxPerKey - (leased.get(key) ?? 0)),
          o.clientRoom,
        ).map((c0) => c0.seq);
        if (picked.length === 0) return { result: [] };
        const { rows, waiting } = claimedOf(
          await q(
            claimStatement(`claimed AS (UPDATE events SET claimed_until = $3, claim_token = $4
               WHERE seq = ANY(ARRAY(SELECT seq FROM events WHERE seq = ANY($2::bigint[]) AND ${CLAIMABLE} FOR UPDATE SKIP LOCKED)) RETURNING *)`),
            [o.now, picked, o.now + o.leaseMs, o.token],
            c,
          ),
        );
        session.leased(rows);
        return { result: eventsInDueOrder(E.rows(rows)), waiting };
      });
    },
    claimTrial: async (key, o) =>
      session.run(async (c) => {
        const { rows, waiting } = claimedOf(
          await q(
            claimStatement(`claimed AS (UPDATE events SET claimed_until = $4, claim_token = $5
               WHERE seq = (SELECT seq FROM events WHERE client_id = $2 AND destination_host = $3 AND ${CLAIMABLE}
                            ORDER BY (attempts = 0), next_attempt_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *)`),
            [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token],
            c,
          ),
        );
        session.leased(rows);
        return { result: opt(E, rows[0]), waiting };
      }),
    claimOfKey: async (key, o) => {
      // A limit past maxPerKey could never be used: capped before SQL.
      const limit = Math.min(o.limit, o.maxPerKey);
      if (limit <= 0) return [];
      const k = deliveryKey(key.clientId, key.host);
      return session.run(async (c) => {
        // One statement, one commit: with no other session's lease of the key known in this tenure,
        // the room is the cap less this store's own leases and nothing is counted.
        const known = session.knownLeased(k, o.now);
        const values = [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token];
        const window = limit * WINDOW_PER_EVENT;
        const answer = (
          known !== undefined
            ? await c.query({
                ...CLAIM_OF_KEY,
                values: [...values, Math.max(0, Math.min(limit, o.maxPerKey - known)), window],
              })
            : await c.query({
                ...CLAIM_OF_KEY_COUNTED,
                values: [...values, limit, window, o.maxPerKey, session.ownOf(k, o.now)],
              })
        ).rows as Row[];
        if (known === undefined && answer[0])
          session.counted(k, Number(answer[0].leased), Number(answer[0].own_leased));
        const { rows, waiting } = claimedOf(answer);
        session.leased(rows);
        return { result: eventsInDueOrder(E.rows(rows)), waiting };
      });
    },
  };
}

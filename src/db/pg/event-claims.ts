import type { EventStore } from "../../store/store.js";
import { E, opt, type Row } from "./mapping.js";
import { deliveryKey } from "../../store/delivery-key.js";
import { pickWithinRoom } from "../../store/fairness.js";
import type { PgContext } from "./context.js";
import { eventsInDueOrder } from "../kit/claim-order.js";
import { EVENT_SCAN_FACTOR } from "../kit/claim-window.js";

/**
 * The claim side of the EventStore on PostgreSQL: due events under the per-key cap, a key's refill
 * and its trial, by any number of instances on one database with no cluster-wide lock.
 *
 * The per-key cap (maxPerKey) holds across instances because claims of the SAME delivery key
 * (client, destination host) are serialised, and only those: each claim takes its key's row in
 * delivery_keys FOR UPDATE, then counts the key's leased events, then leases at most the rest of
 * the cap, all in one transaction. Two things make that cheap and correct:
 *
 * - The count walks events_key_leased_idx, a partial index over leased events only (releases set
 *   claimed_until back to null; a delivered or failed event leaves it): O(in flight), never the
 *   key's backlog (the count it replaces walked every pending event of the key: 8 ms at thousands).
 * - READ COMMITTED: a statement's snapshot is taken when the statement starts, so a count in the
 *   statement that takes the lock would not see the leases of a claim that committed while this
 *   one waited for (or just before it got) the lock, and the cap would be exceeded. The count must
 *   start after the lock is held. So each claim is one call of a PL/pgSQL function
 *   (migrations/pg/0008_event_claim_functions.sql): a VOLATILE function takes a fresh snapshot at
 *   each statement inside it, so lock, count and lease are three statements in the call's one
 *   transaction and one round trip. The call is a single statement: its locks end with it, so a
 *   frozen or disconnected instance never holds a key's lock beyond its own statement.
 *
 * claimOfKey and claimTrial wait for their key's lock (one claim statement at most; they hold no
 * other lock while they wait, so no wait cycle can form). claimDue locks the keys of the events it
 * picked with SKIP LOCKED: a key another claim holds right now is left to that claim. Event rows
 * are taken FOR UPDATE SKIP LOCKED as before, and the fair-share caps (keyRoom, clientRoom) are this
 * process's own, applied when picking, before the call.
 *
 * A key's delivery_keys row is written by its first claim and kept (one per client and host ever
 * claimed: small, and nothing else is in it).
 *
 * Every statement is a named (prepared) statement, planned once per connection; the functions plan
 * theirs once per connection too, as generic plans (a custom plan per call costs about 0.7 ms of
 * planning, more than the claim).
 */

/**
 * An event that may be claimed at `$1` (now): pending, due, unleased, and no earlier event of its
 * task pending (each task's events go out in order). The task check is a probe of
 * events_task_seq_idx per row looked at: OFFSET 0 keeps the planner from turning it into an
 * anti-join over every pending event, which it sorts whole before taking the first few (14 ms
 * with a 5,000-event backlog, against 0.1 ms for an index walk that stops at the limit). The claim
 * functions (migrations/pg/0008_event_claim_functions.sql) write the same condition: a change here
 * is a new migration that replaces them too.
 */
const CLAIMABLE = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
  AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.endpoint_id IS NOT DISTINCT FROM events.endpoint_id AND e2.delivery_status = 'pending' OFFSET 0)`;

/**
 * claimDue's candidates: a window of the first claimable events in the due index's order ($3 of
 * them, keys in $2 and clients in $4 left out), each with its key's leased events now (through
 * events_key_leased_idx, once per key), read without any lock: the picks made from it are checked
 * again under the keys' locks (genrelay_claim_events).
 */
const CANDIDATES = {
  name: "genrelay_event_candidates",
  text: `WITH c AS MATERIALIZED (
      SELECT seq, client_id, destination_host, next_attempt_at FROM events WHERE ${CLAIMABLE}
        AND NOT ((client_id || '|' || destination_host) = ANY($2::text[])) AND NOT (client_id = ANY($4::text[]))
      ORDER BY next_attempt_at LIMIT $3),
    k AS (SELECT DISTINCT client_id, destination_host FROM c)
    SELECT c.seq, c.client_id, c.destination_host, c.next_attempt_at, l.n AS leased FROM c
      JOIN (SELECT k.client_id, k.destination_host, (SELECT count(*) FROM events e WHERE e.client_id = k.client_id
              AND e.destination_host = k.destination_host AND e.delivery_status = 'pending' AND e.claimed_until >= $1) AS n
            FROM k) l ON l.client_id = c.client_id AND l.destination_host = c.destination_host`,
};

/** $1 now, $2 seqs in picked order, $3 their clients, $4 their hosts, $5 lease end, $6 token, $7 maxPerKey. */
const CLAIM_EVENTS = {
  name: "genrelay_claim_events",
  text: "SELECT * FROM genrelay_claim_events($1, $2::bigint[], $3::text[], $4::text[], $5, $6, $7)",
};

/** $1 now, $2 client, $3 host, $4 lease end, $5 token, $6 limit, $7 window, $8 maxPerKey (null: none), $9 trial. */
const CLAIM_OF_KEY = {
  name: "genrelay_claim_of_key",
  text: "SELECT * FROM genrelay_claim_of_key($1, $2, $3, $4, $5, $6, $7, $8, $9)",
};

/**
 * Several keys' refills in one statement and one round trip: genrelay_claim_of_key once per key,
 * the keys in (client, host) order. Each call takes its key's lock and keeps it to the end of the
 * statement, so two such claims that share keys lock them in the same order and never wait for
 * each other in a cycle (claimDue's locks are SKIP LOCKED and claimOfKey's one key: neither
 * waits while it holds another key). Each call counts its key's leases after its lock is held, as
 * claimOfKey does. $1 now, $2 clients, $3 hosts, $4 limits, $5 lease end, $6 token, $7 maxPerKey.
 */
const CLAIM_OF_KEYS = {
  name: "genrelay_claim_of_keys",
  text: `SELECT c.* FROM (SELECT * FROM unnest($2::text[], $3::text[], $4::int[]) AS k(client, host, lim) ORDER BY client, host) k
    CROSS JOIN LATERAL genrelay_claim_of_key($1, k.client, k.host, $5, $6, k.lim, k.lim * ${EVENT_SCAN_FACTOR}, $7, false) c`,
};

export function pgEventClaims(
  s: PgContext,
): Pick<EventStore, "claimDue" | "claimTrial" | "claimOfKey" | "claimOfKeys"> {
  const run = async (statement: { name: string; text: string }, values: unknown[]): Promise<Row[]> =>
    (await s.pool.query({ ...statement, values })).rows as Row[];
  return {
    claimDue: async (o) => {
      if (o.limit <= 0) return [];
      const candidates = (
        await run(CANDIDATES, [o.now, o.excludeKeys, o.limit * EVENT_SCAN_FACTOR, o.excludeClients ?? []])
      ).sort((a, b) => Number(a.next_attempt_at) - Number(b.next_attempt_at) || Number(a.seq) - Number(b.seq));
      if (candidates.length === 0) return [];
      // What every instance has in flight per key counts against the shared cap; the claim counts
      // again under the keys' locks and takes no more than the cap allows then.
      const leased = new Map<string, number>();
      for (const c of candidates)
        leased.set(deliveryKey(c.client_id as string, c.destination_host as string), Number(c.leased));
      const picked = pickWithinRoom(
        candidates.map((c) => ({
          seq: Number(c.seq),
          clientId: c.client_id as string,
          host: c.destination_host as string,
        })),
        o.limit,
        (key) => Math.min(o.keyRoom(key), o.maxPerKey - (leased.get(key) ?? 0)),
        o.clientRoom,
      );
      if (picked.length === 0) return [];
      const rows = await run(CLAIM_EVENTS, [
        o.now,
        picked.map((c) => c.seq),
        picked.map((c) => c.clientId),
        picked.map((c) => c.host),
        o.now + o.leaseMs,
        o.token,
        o.maxPerKey,
      ]);
      return eventsInDueOrder(E.rows(rows));
    },
    claimTrial: async (key, o) =>
      opt(
        E,
        (await run(CLAIM_OF_KEY, [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token, 1, 1, null, true]))[0],
      ),
    claimOfKey: async (key, o) => {
      // A limit past maxPerKey could never be used: capped before SQL.
      const limit = Math.min(o.limit, o.maxPerKey);
      if (limit <= 0) return [];
      const rows = await run(CLAIM_OF_KEY, [
        o.now,
        key.clientId,
        key.host,
        o.now + o.leaseMs,
        o.token,
        limit,
        limit * EVENT_SCAN_FACTOR,
        o.maxPerKey,
        false,
      ]);
      return eventsInDueOrder(E.rows(rows));
    },
    claimOfKeys: async (keys, o) => {
      // As claimOfKey: a limit past maxPerKey could never be used.
      const wanted = keys.filter((k) => k.limit > 0).map((k) => ({ ...k, limit: Math.min(k.limit, o.maxPerKey) }));
      if (wanted.length === 0 || o.maxPerKey <= 0) return [];
      const rows = await run(CLAIM_OF_KEYS, [
        o.now,
        wanted.map((k) => k.clientId),
        wanted.map((k) => k.host),
        wanted.map((k) => k.limit),
        o.now + o.leaseMs,
        o.token,
        o.maxPerKey,
      ]);
      return eventsInDueOrder(E.rows(rows));
    },
  };
}

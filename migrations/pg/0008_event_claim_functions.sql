-- Event claims without a cluster-wide lock (src/db/pg/event-claims.ts has the reasoning): each is
-- one call of one of these functions, one statement and so one transaction, whatever the client
-- does meanwhile. Inside, each statement takes a fresh snapshot (VOLATILE, READ COMMITTED): the
-- count of a key's leases runs after the key's lock is held, so it sees every lease committed by a
-- claim that held the lock before.

-- Up to p_limit of one key's claimable events (p_trial: one, an attempted one first) under a lease,
-- and no more than p_max less the key's leased events (null: no cap), under the key's lock.
CREATE FUNCTION genrelay_claim_of_key(p_now bigint, p_client text, p_host text, p_until bigint, p_token text,
  p_limit integer, p_window integer, p_max integer, p_trial boolean) RETURNS SETOF events
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  room integer := p_limit;
BEGIN
  -- The key's lock, its delivery_keys row (written by the key's first claim): claims of this key
  -- wait for each other here, one statement long; claims of other keys never do.
  PERFORM FROM delivery_keys WHERE client_id = p_client AND destination_host = p_host FOR UPDATE;
  IF NOT FOUND THEN
    -- A key with nothing pending has nothing to claim, and gets no row.
    IF NOT EXISTS (SELECT 1 FROM events WHERE client_id = p_client AND destination_host = p_host AND delivery_status = 'pending') THEN
      RETURN;
    END IF;
    INSERT INTO delivery_keys (client_id, destination_host) VALUES (p_client, p_host) ON CONFLICT DO NOTHING;
    PERFORM FROM delivery_keys WHERE client_id = p_client AND destination_host = p_host FOR UPDATE;
  END IF;
  -- A new statement, so a new snapshot: every lease of the key committed before the lock was ours.
  -- Through events_key_leased_idx: the key's leases, not its backlog.
  IF p_max IS NOT NULL THEN
    SELECT least(p_limit, p_max - count(*)) INTO room FROM events
      WHERE client_id = p_client AND destination_host = p_host AND delivery_status = 'pending' AND claimed_until >= p_now;
  END IF;
  IF room <= 0 THEN
    RETURN;
  END IF;
  IF p_trial THEN
    RETURN QUERY UPDATE events SET claimed_until = p_until, claim_token = p_token
      WHERE seq = (SELECT e.seq FROM events e WHERE e.client_id = p_client AND e.destination_host = p_host
                     AND e.delivery_status = 'pending' AND e.next_attempt_at <= p_now AND (e.claimed_until IS NULL OR e.claimed_until < p_now)
                     AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = e.task_id AND e2.sequence < e.sequence AND e2.endpoint_id IS NOT DISTINCT FROM e.endpoint_id AND e2.delivery_status = 'pending' OFFSET 0)
                   ORDER BY (e.attempts = 0), e.next_attempt_at, e.seq LIMIT 1 FOR UPDATE SKIP LOCKED)
      RETURNING events.*;
  ELSE
    -- A window of the first p_window claimable events in events_key_due_idx's order (rows other
    -- transactions hold skipped), ordered by (due time, seq); the first `room` of them are leased.
    RETURN QUERY UPDATE events SET claimed_until = p_until, claim_token = p_token
      WHERE seq = ANY(ARRAY(
        SELECT w.seq FROM (
          SELECT e.seq, e.next_attempt_at FROM events e WHERE e.client_id = p_client AND e.destination_host = p_host
            AND e.delivery_status = 'pending' AND e.next_attempt_at <= p_now AND (e.claimed_until IS NULL OR e.claimed_until < p_now)
            AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = e.task_id AND e2.sequence < e.sequence AND e2.endpoint_id IS NOT DISTINCT FROM e.endpoint_id AND e2.delivery_status = 'pending' OFFSET 0)
          ORDER BY e.next_attempt_at LIMIT p_window FOR UPDATE SKIP LOCKED) w
        ORDER BY w.next_attempt_at, w.seq LIMIT room))
      RETURNING events.*;
  END IF;
END $$;
--> statement-breakpoint
-- The events p_seqs (picked in this order; p_clients, p_hosts their keys) under a lease, where
-- still claimable, each key's within p_max less its leased events. A key whose lock another claim
-- holds is left to that claim (SKIP LOCKED): none of its events are taken, and no claim waits.
CREATE FUNCTION genrelay_claim_events(p_now bigint, p_seqs bigint[], p_clients text[], p_hosts text[],
  p_until bigint, p_token text, p_max integer) RETURNS SETOF events
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  locked_clients text[];
  locked_hosts text[];
BEGIN
  -- Rows for keys never claimed before, written in one order: claims writing the same new keys
  -- wait for each other in that order, never in a cycle.
  INSERT INTO delivery_keys (client_id, destination_host)
    SELECT DISTINCT k.c, k.h FROM unnest(p_clients, p_hosts) AS k(c, h)
      WHERE NOT EXISTS (SELECT 1 FROM delivery_keys d WHERE d.client_id = k.c AND d.destination_host = k.h)
      ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
  SELECT array_agg(d.client_id), array_agg(d.destination_host) INTO locked_clients, locked_hosts FROM (
    SELECT client_id, destination_host FROM delivery_keys
      WHERE (client_id, destination_host) IN (SELECT k.c, k.h FROM unnest(p_clients, p_hosts) AS k(c, h))
      FOR UPDATE SKIP LOCKED) d;
  IF locked_clients IS NULL THEN
    RETURN;
  END IF;
  -- A new statement, so a new snapshot, with the keys' locks held: their leases counted through
  -- events_key_leased_idx, then each key's picks in order within the rest of its cap.
  RETURN QUERY
    WITH leased AS (
      SELECT k.c, k.h, (SELECT count(*) FROM events e WHERE e.client_id = k.c AND e.destination_host = k.h
                          AND e.delivery_status = 'pending' AND e.claimed_until >= p_now) AS n
        FROM unnest(locked_clients, locked_hosts) AS k(c, h)),
    picked AS (
      SELECT p.seq, row_number() OVER (PARTITION BY p.c, p.h ORDER BY p.ord) AS nth, l.n
        FROM unnest(p_seqs, p_clients, p_hosts) WITH ORDINALITY AS p(seq, c, h, ord)
        JOIN leased l ON l.c = p.c AND l.h = p.h)
    UPDATE events SET claimed_until = p_until, claim_token = p_token
      WHERE seq = ANY(ARRAY(
        SELECT e.seq FROM events e WHERE e.seq = ANY(ARRAY(SELECT picked.seq FROM picked WHERE picked.nth <= p_max - picked.n))
          AND e.delivery_status = 'pending' AND e.next_attempt_at <= p_now AND (e.claimed_until IS NULL OR e.claimed_until < p_now)
          AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = e.task_id AND e2.sequence < e.sequence AND e2.endpoint_id IS NOT DISTINCT FROM e.endpoint_id AND e2.delivery_status = 'pending' OFFSET 0)
        FOR UPDATE SKIP LOCKED))
      RETURNING events.*;
END $$;

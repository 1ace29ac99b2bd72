import type { PgContext } from "./context.js";

/**
 * Feed positions on PostgreSQL, handed out when the feed is read, not when an event is written.
 *
 * An event is written with `client_seq = 0` ("not yet placed"): a transition takes no lock on its
 * client for it, so transitions of one client's tasks run side by side (the client's row used to
 * be updated per event, `event_seq = event_seq + 1`, and its lock held to commit serialised them).
 * The feed never shows an unplaced event (its positions are > the cursor, so > 0). Before reading,
 * the reader places the client's unplaced events that have committed, oldest `seq` first, after
 * the highest position handed out so far, under the client row's lock (FOR NO KEY UPDATE: readers
 * of one client's feed take turns, task and event inserts are not held up). Only committed events
 * are placed, and a later placement starts above every earlier one, so an event that commits late
 * gets a position above the ones a reader has already passed: no reader ever skips it
 * (test/integration/store-contract.test.ts, "the events feed on PostgreSQL never skips a late commit").
 * `clients.event_seq` keeps the highest position handed out, so pruned events never let a position
 * be handed out twice, and cursors issued before this scheme stay valid.
 *
 * At most `limit` events are placed per read: a page is still full whenever at least `limit`
 * events follow the cursor, so a short page still means "caught up".
 */
export async function placeInFeed(s: PgContext, clientId: string, limit: number): Promise<void> {
  // Nothing waiting to be placed: the common read, no transaction and no lock.
  if (!(await s.one("SELECT 1 FROM events WHERE client_id = $1 AND client_seq = 0 LIMIT 1", [clientId]))) return;
  await s.tx(async (c) => {
    const client = await s.one("SELECT event_seq FROM clients WHERE id = $1 FOR NO KEY UPDATE", [clientId], c);
    if (!client) return;
    // A statement of its own after the lock: its snapshot sees every placement committed before it.
    const placed = await s.one(
      `WITH base AS (
         SELECT greatest($2::bigint, coalesce((SELECT max(client_seq) FROM events WHERE client_id = $1), 0)) AS top),
       todo AS (
         SELECT id, row_number() OVER (ORDER BY seq) AS n FROM events WHERE client_id = $1 AND client_seq = 0 ORDER BY seq LIMIT $3),
       up AS (
         UPDATE events e SET client_seq = base.top + todo.n FROM todo, base WHERE e.id = todo.id RETURNING e.client_seq)
       SELECT max(client_seq) AS top FROM up`,
      [clientId, client.event_seq, limit],
      c,
    );
    if (placed?.top !== null && placed?.top !== undefined)
      await c.query("UPDATE clients SET event_seq = $2 WHERE id = $1", [clientId, placed.top]);
  });
}

import type { Queryable, Row } from "./mapping.js";

/**
 * A client's stored bytes on PostgreSQL: its client_storage row (intake's requests, and what has
 * been folded) plus its client_storage_log rows, which triggers append for everything written
 * afterwards (events per destination, attempts' answers, outputs; deletes as negative rows:
 * migrations/pg/0011_stored_bytes_triggers.sql). Appending never waits on another writer, so
 * deliveries and transitions do not queue behind creations on the client's row; the sum is one
 * index range per client, kept short by folding the log into client_storage in the background.
 */

/** The client ($n) 's logged bytes not folded yet, as an SQL expression. */
export const loggedBytesOf = (param: string) =>
  `(SELECT coalesce(sum(l.bytes), 0) FROM client_storage_log l WHERE l.client_id = ${param})`;

/** The client's stored bytes, without a lock. */
export async function storedBytesOfClient(c: Queryable, clientId: string): Promise<number> {
  const r = await c.query(
    `SELECT coalesce((SELECT stored_bytes FROM client_storage WHERE client_id = $1), 0) + ${loggedBytesOf("$1")} AS n`,
    [clientId],
  );
  return Number((r.rows[0] as Row).n);
}

/** Log rows folded per statement: a short statement beside the live writers. */
const FOLD_BATCH = 5_000;

/**
 * Moves up to FOLD_BATCH log rows into their clients' client_storage rows, in one statement (so no
 * reader sees them twice or not at all). SKIP LOCKED: instances fold side by side. Rows are
 * upserted in client order, the order every multi-client writer of client_storage takes, so two
 * never wait on each other in a cycle. Returns the rows folded.
 */
export async function foldStoredBytesLog(c: Queryable): Promise<number> {
  const r = await c.query(
    `WITH taken AS (
       DELETE FROM client_storage_log WHERE id IN (
         SELECT id FROM client_storage_log ORDER BY id LIMIT ${FOLD_BATCH} FOR UPDATE SKIP LOCKED)
       RETURNING client_id, bytes
     ), per_client AS (
       SELECT client_id, sum(bytes) AS bytes, count(*) AS n FROM taken
       WHERE client_id IN (SELECT id FROM clients) GROUP BY client_id ORDER BY client_id
     ), folded AS (
       INSERT INTO client_storage (client_id, stored_bytes) SELECT client_id, bytes FROM per_client
       ON CONFLICT (client_id) DO UPDATE SET stored_bytes = client_storage.stored_bytes + excluded.stored_bytes
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM taken) AS n, (SELECT count(*) FROM folded) AS clients`,
  );
  return Number((r.rows[0] as Row).n);
}

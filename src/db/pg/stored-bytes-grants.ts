import type { Queryable, Row } from "./mapping.js";
import { loggedBytesOf } from "./stored-bytes-log.js";

/**
 * The stored-bytes bound on PostgreSQL without a row every instance's creations wait on (issue #43).
 *
 * Each instance creates against room granted to it ahead of time (client_storage_grants, one row
 * per client and instance): a creation spends from its own instance's row only, and its bytes are
 * appended to client_storage_log, so creations on several instances never wait on each other. What
 * the client may still be given is its bound less its stored bytes (client_storage + the log) less
 * every grant; a creation moves bytes from a grant to the log in one transaction, so any snapshot
 * sees that sum unchanged. When an instance's grant runs out, it asks for more under the client's
 * client_storage row lock (refills take turns there: once per grant, not per batch). When what is
 * left does not cover the creation, every grant is taken back (waiting for batches spending from
 * them to end) and the creation is decided against the exact stored bytes: a burst on any number of
 * instances stops exactly at the bound. Bytes written later (events, attempts, outputs) are counted
 * without asking, and a grant is spent only while they leave room, so a client past its bound by
 * them is refused at once.
 */

/** A grant is at most this share of what is left (and this many bytes), so room near the bound is not all handed to one instance. */
const GRANT_SHARE = 8;
const MAX_GRANT = 64 * 1024 ** 2;

/**
 * Spends `bytes` of this instance's grant for the client; false (nothing spent) when it holds less,
 * or when what the client stores already (bytes written since the grant count) leaves no room.
 */
async function spendGrant(
  c: Queryable,
  clientId: string,
  holder: string,
  bytes: number,
  limit: number,
): Promise<boolean> {
  const r = await c.query(
    `UPDATE client_storage_grants SET allowance = allowance - $3 WHERE client_id = $1 AND holder = $2 AND allowance >= $3
       AND coalesce((SELECT stored_bytes FROM client_storage WHERE client_id = $1), 0) + ${loggedBytesOf("$1")} + $3 <= $4`,
    [clientId, holder, bytes, limit],
  );
  return (r.rowCount ?? 0) > 0;
}

/**
 * In the creation's transaction: admits `bytes` under `limit` for the client, or gives the exact
 * stored bytes to decide against. `undefined`: admitted, the room spent from this instance's grant
 * (refilled first if need be). A number: the client's stored bytes with no grant outstanding (all
 * taken back, locked until the transaction ends), for the caller's decision, which refuses past the bound.
 */
export async function admitStoredBytes(
  c: Queryable,
  clientId: string,
  holder: string,
  bytes: number,
  limit: number,
): Promise<number | undefined> {
  if (await spendGrant(c, clientId, holder, bytes, limit)) return undefined;
  // Refills of this client take turns on its client_storage row (made if missing).
  await c.query(
    `INSERT INTO client_storage (client_id, stored_bytes) VALUES ($1, 0)
     ON CONFLICT (client_id) DO UPDATE SET stored_bytes = client_storage.stored_bytes`,
    [clientId],
  );
  // A new statement, so a new snapshot: every refill and reclaim before the lock was ours.
  const sums = (
    await c.query(
      `SELECT (SELECT stored_bytes FROM client_storage WHERE client_id = $1) + ${loggedBytesOf("$1")} AS stored,
              (SELECT coalesce(sum(allowance), 0) FROM client_storage_grants WHERE client_id = $1) AS granted`,
      [clientId],
    )
  ).rows[0] as Row;
  const free = limit - Number(sums.stored) - Number(sums.granted);
  if (free >= bytes) {
    const grant = Math.min(free, Math.max(bytes, Math.min(Math.floor(free / GRANT_SHARE), MAX_GRANT)));
    await c.query(
      `INSERT INTO client_storage_grants (client_id, holder, allowance) VALUES ($1, $2, $3)
       ON CONFLICT (client_id, holder) DO UPDATE SET allowance = client_storage_grants.allowance + excluded.allowance`,
      [clientId, holder, grant - bytes],
    );
    return undefined;
  }
  // Not enough left: take every grant back (each instance's next batch asks again), then the exact figure.
  await c.query("DELETE FROM client_storage_grants WHERE client_id = $1", [clientId]);
  const exact = (
    await c.query(
      `SELECT coalesce((SELECT stored_bytes FROM client_storage WHERE client_id = $1), 0) + ${loggedBytesOf("$1")} AS n`,
      [clientId],
    )
  ).rows[0] as Row;
  return Number(exact.n);
}

/** Gives back room spent for a creation that wrote nothing (a concurrent replay committed first). */
export async function refundGrant(c: Queryable, clientId: string, holder: string, bytes: number): Promise<void> {
  await c.query("UPDATE client_storage_grants SET allowance = allowance + $3 WHERE client_id = $1 AND holder = $2", [
    clientId,
    holder,
    bytes,
  ]);
}

/** An instance closing returns what it was granted (a crashed one's is taken back when room runs out). */
export async function returnGrants(c: Queryable, holder: string): Promise<void> {
  await c.query("DELETE FROM client_storage_grants WHERE holder = $1", [holder]);
}

import type pg from "pg";
import type { Queryable, Row } from "./mapping.js";
import { loggedBytesOf } from "./stored-bytes-log.js";

/**
 * The stored-bytes bound on PostgreSQL without a row that creations wait on (issue #43).
 *
 * Each instance reserves room under a client's bound ahead of its creations: its row in
 * client_storage_grants (one per client and instance) says how much. The instance spends that room
 * in memory (StoredBytesGrants.take): a creation writes its task and appends its bytes to
 * client_storage_log, and only holds its grant row FOR KEY SHARE while it does, a lock that
 * creations never wait on each other for, on this instance or any other. What was spent is settled
 * onto the row in the background (and by the next refill), so until then the row still counts the
 * spent bytes and the log counts them too: every other reader sees less room than there is, never more.
 *
 * What the client may still be given is its bound less its stored bytes (client_storage + the log)
 * less every grant. A refill takes a share of that in one short transaction of its own, under the
 * client's client_storage row lock (refills take turns there: once per grant, one at a time per
 * instance and client). When what is left does not cover a creation, the creation takes every grant
 * back in its own transaction (the DELETE waits for creations holding a grant to end, so their bytes
 * are in the log it reads next) and is decided against the exact stored bytes: a burst on any number
 * of instances stops exactly at the bound, and is refused below it by nothing. Bytes written later
 * (events, attempts, outputs) are counted without asking, and a grant is spent only while they leave
 * room, so a client past its bound by them is refused at once.
 */

/** A grant is at most this share of what is left (and this many bytes), so room near the bound is not all handed to one instance. */
const GRANT_SHARE = 8;
const MAX_GRANT = 64 * 1024 ** 2;

/** The client's client_storage row ($1), made if missing, locked until the transaction ends: refills and take-backs take turns on it. */
const LOCK_CLIENT_STORAGE = `INSERT INTO client_storage (client_id, stored_bytes) VALUES ($1, 0)
  ON CONFLICT (client_id) DO UPDATE SET stored_bytes = client_storage.stored_bytes`;

/** This instance's room for one client, in memory. */
interface Held {
  /** What may still be spent without asking. */
  available: number;
  /** Spent by committed creations, not yet taken off the row. */
  spent: number;
  /** Taken by creations still writing. */
  pending: number;
  /** Bumped whenever `available` is set anew: room taken before then is not given back to it. */
  epoch: number;
  refill?: Promise<boolean> | undefined;
}

/** Room a creation took (StoredBytesGrants.take), settled once it is written or not. */
export interface TakenRoom {
  clientId: string;
  bytes: number;
  epoch: number;
}

/** In a creation's statement: its client's grant row held FOR KEY SHARE ($1 client, $2 holder), so a take-back waits for it. */
export const GRANT_HELD = (client: string, holder: string) =>
  `SELECT client_id FROM client_storage_grants WHERE client_id = ${client} AND holder = ${holder} FOR KEY SHARE`;

export class StoredBytesGrants {
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly pool: pg.Pool,
    /** This instance's name in client_storage_grants (its application name). */
    readonly holder: string,
  ) {}

  /**
   * Takes `bytes` of this instance's room for the client, refilling it first if need be; null when
   * what is left under `limit` does not cover them: the creation is then decided exactly (exactStoredBytes).
   */
  async take(clientId: string, bytes: number, limit: number): Promise<TakenRoom | null> {
    for (;;) {
      const h = this.of(clientId);
      if (h.refill) {
        await h.refill;
        continue;
      }
      if (h.available >= bytes) {
        h.available -= bytes;
        h.pending += bytes;
        return { clientId, bytes, epoch: h.epoch };
      }
      h.refill = this.refill(clientId, bytes, limit, h).finally(() => {
        h.refill = undefined;
      });
      if (!(await h.refill)) return null;
    }
  }

  /** A creation that took `room` is over: `kept` bytes of it written (and logged), the rest given back. */
  settle(room: TakenRoom, kept: number): void {
    const h = this.of(room.clientId);
    h.pending -= room.bytes;
    h.spent += kept;
    if (h.epoch === room.epoch) h.available += room.bytes - kept;
  }

  /** This instance's grant of the client is gone or unusable (taken back, no room): asked for again next time. */
  drop(clientId: string): void {
    const h = this.of(clientId);
    h.available = 0;
    h.epoch++;
  }

  /**
   * Takes what was spent off the rows, in one statement for every client: other instances' refills
   * then see the room as it is. A client being refilled is left to its refill, which settles too.
   */
  async settleSpent(): Promise<void> {
    const clients: string[] = [];
    const amounts: number[] = [];
    for (const [clientId, h] of this.held) {
      if (h.spent <= 0 || h.refill) continue;
      clients.push(clientId);
      amounts.push(h.spent);
      h.spent = 0;
    }
    if (clients.length === 0) return;
    try {
      await this.pool.query(
        `UPDATE client_storage_grants g SET allowance = greatest(0, g.allowance - s.bytes)
           FROM unnest($1::text[], $2::bigint[]) AS s(client_id, bytes) WHERE g.client_id = s.client_id AND g.holder = $3`,
        [clients, amounts, this.holder],
      );
    } catch (err) {
      clients.forEach((clientId, i) => {
        this.of(clientId).spent += amounts[i]!;
      });
      throw err;
    }
  }

  private of(clientId: string): Held {
    let h = this.held.get(clientId);
    if (!h) this.held.set(clientId, (h = { available: 0, spent: 0, pending: 0, epoch: 0 }));
    return h;
  }

  /**
   * One short transaction under the client's client_storage row lock: what this instance spent is
   * settled, and a share of what is left is added to its row. False (nothing written) when what is
   * left does not cover `bytes`.
   */
  private async refill(clientId: string, bytes: number, limit: number, h: Held): Promise<boolean> {
    const settled = h.spent;
    h.spent = 0;
    const c = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await c.query("BEGIN");
      // Refills of this client take turns on its client_storage row (made if missing).
      await c.query(LOCK_CLIENT_STORAGE, [clientId]);
      // A new statement, so a new snapshot: every refill and take-back before the lock was ours.
      const sums = (
        await c.query(
          `SELECT (SELECT stored_bytes FROM client_storage WHERE client_id = $1) + ${loggedBytesOf("$1")} AS stored,
                  (SELECT coalesce(sum(allowance), 0) FROM client_storage_grants WHERE client_id = $1) AS granted,
                  (SELECT allowance FROM client_storage_grants WHERE client_id = $1 AND holder = $2) AS mine`,
          [clientId, this.holder],
        )
      ).rows[0] as Row;
      // Bytes spent here are in the log and still in this row: counted once. What creations still
      // writing took, and what was spent since `settled`, is in the row too and must come out of it.
      const row = sums.mine === null ? null : Number(sums.mine);
      const base = row === null ? 0 : Math.max(0, row - settled);
      const free = limit - Number(sums.stored) - (Number(sums.granted) - (row === null ? 0 : Math.min(settled, row)));
      const need = Math.max(0, bytes + h.pending + h.spent - base);
      if (free < need) {
        await c.query("ROLLBACK");
        h.spent += settled;
        return false;
      }
      const grant = Math.min(free, Math.max(need, Math.min(Math.floor(free / GRANT_SHARE), MAX_GRANT)));
      const allowance = base + grant;
      await c.query(
        `INSERT INTO client_storage_grants (client_id, holder, allowance) VALUES ($1, $2, $3)
         ON CONFLICT (client_id, holder) DO UPDATE SET allowance = excluded.allowance`,
        [clientId, this.holder, allowance],
      );
      await c.query("COMMIT");
      // The row holds what creations still writing took; what they spent since is settled later.
      h.available = Math.max(0, allowance - h.pending - h.spent);
      h.epoch++;
      return true;
    } catch (err) {
      broken = err instanceof Error ? err : new Error(String(err));
      await c.query("ROLLBACK").catch(() => {});
      h.spent += settled;
      throw err;
    } finally {
      c.release(broken);
    }
  }
}

/**
 * In a creation's transaction, when room ran out: every grant of the client taken back (waiting for
 * creations that hold one to end) and the client's exact stored bytes, locked until the transaction
 * ends, for the caller's decision, which refuses past the bound.
 */
export async function exactStoredBytes(c: Queryable, clientId: string): Promise<number> {
  await c.query(LOCK_CLIENT_STORAGE, [clientId]);
  await c.query("DELETE FROM client_storage_grants WHERE client_id = $1", [clientId]);
  // A new statement, so a new snapshot: the bytes of every creation that held a grant are in the log.
  const exact = (
    await c.query(
      `SELECT coalesce((SELECT stored_bytes FROM client_storage WHERE client_id = $1), 0) + ${loggedBytesOf("$1")} AS n`,
      [clientId],
    )
  ).rows[0] as Row;
  return Number(exact.n);
}

/**
 * In a creation's transaction that took room: whether its grant row is still there (held FOR KEY
 * SHARE until the transaction ends) and what the client stores already (bytes written since the
 * grant count) leaves room for `bytes` under `limit`.
 */
export async function grantStillHolds(
  c: Queryable,
  clientId: string,
  holder: string,
  bytes: number,
  limit: number,
): Promise<boolean> {
  const r = await c.query(
    `WITH g AS (${GRANT_HELD("$1", "$2")})
     SELECT EXISTS (SELECT 1 FROM g)
        AND coalesce((SELECT stored_bytes FROM client_storage WHERE client_id = $1), 0) + ${loggedBytesOf("$1")} + $3 <= $4 AS ok`,
    [clientId, holder, bytes, limit],
  );
  return (r.rows[0] as Row).ok === true;
}

/** An instance closing returns what it was granted (a crashed one's is taken back when room runs out). */
export async function returnGrants(c: Queryable, holder: string): Promise<void> {
  await c.query("DELETE FROM client_storage_grants WHERE holder = $1", [holder]);
}

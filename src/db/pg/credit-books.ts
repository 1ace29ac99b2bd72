import type pg from "pg";
import type { CreditPosition, ReservationsAround } from "../../store/store.js";
import type { Queryable, Row } from "./mapping.js";

/**
 * A client's credit books on PostgreSQL, kept where a client's tasks do not take turns for them.
 *
 * Nothing of the books is written on the client's row per task (it used to hold running totals:
 * every creation with a reservation, submission and charge updated it, each holding its lock to
 * commit, so one client's tasks went through one at a time, on every instance):
 * - what is reserved is the sum of the client's tasks' own `points_reserved`: each task row carries
 *   its reservation, set by the transaction that changes the task, under the task row's lock;
 * - a charge or a refund is one `credit_ledger` row; the client row's `points_charged` and
 *   `points_refunded` are the totals of the rows rolled up so far (rollUpLedger), and the position
 *   adds the rows not rolled up yet, so it is read, whole, in one statement.
 *
 * Deciding still takes turns, per client and only among deciders: a creation with a cap or a limit
 * and the submission of a limited client's task take the client's credit lock (lockCredit), then
 * read the books in a statement of their own, so they see every decision committed before them. A
 * completion, a charge, an event or a creation without a cap or limit takes no lock of the client.
 * A completion committing beside a decision turns a reservation into a charge: the decision's one
 * statement saw the books before it or after it, both whole, so the limit holds exactly as when
 * the completion waited for the decider's lock (core/credits.ts; test/integration/pg-credits.test.ts
 * bursts creations on three stores of one database and checks the limit).
 */

/** The credit locks' key space (rate-limits.ts and webhook-endpoints.ts have their own). */
const CREDIT_LOCK_SPACE = 0x67_72_63; // "grc"
/** Ledger rows not yet rolled up at which a read of the books rolls them up. */
const ROLL_UP_AT = 64;

/**
 * Takes the client's credit lock until the transaction ends: an advisory lock on its id, which
 * writes nothing (a row lock marks the row). A statement of its own, before the reads it guards:
 * under READ COMMITTED each statement has its own snapshot, taken once this one has the lock.
 */
export async function lockCredit(c: Queryable, clientId: string): Promise<void> {
  await c.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [CREDIT_LOCK_SPACE, clientId]);
}

export interface CreditBooks {
  position: CreditPosition;
  /** The client's reservations seen from `around` (left out of every sum); zeros without one. */
  reservations: ReservationsAround;
  /** The price learned for the `priceKey` asked for, in the same statement (null: none, or none asked). */
  learnedPrice: number | null;
}

/**
 * The client's position and, seen from one of its tasks, its reservations, in one statement (one
 * snapshot: a charge committed meanwhile is seen in both or in neither); with a `priceKey`, the
 * price learned for it too (a submission's decision reads both). Rolls the ledger up, beside the
 * read, once enough of it waits.
 */
export async function readCredit(
  c: Queryable,
  pool: pg.Pool,
  clientId: string,
  around: string | null,
  priceKey = "",
): Promise<CreditBooks | undefined> {
  const r = (
    await c.query(
      `SELECT c.credit_limit, c.revoked_at, c.points_charged + coalesce(l.charged, 0) AS charged,
              c.points_refunded + coalesce(l.refunded, 0) AS refunded, coalesce(l.n, 0) AS unrolled,
              coalesce(t.reserved, 0) AS reserved, coalesce(t.in_flight, 0) AS in_flight,
              coalesce(t.ahead, 0) AS ahead, coalesce(t.others, 0) AS others,
              (SELECT points FROM learned_prices WHERE price_key = $3 AND $3 <> '') AS learned_price
       FROM clients c
       LEFT JOIN LATERAL (SELECT sum(charged) AS charged, sum(refunded) AS refunded, count(*) AS n
                          FROM credit_ledger WHERE client_id = c.id AND NOT rolled_up) l ON true
       LEFT JOIN LATERAL (
         SELECT sum(points_reserved) AS reserved,
                sum(points_reserved) FILTER (WHERE id <> $2 AND phase <> 'done' AND (phase = 'submitted' OR submit_attempts > 0)) AS in_flight,
                sum(points_reserved) FILTER (WHERE id < $2 AND phase <> 'done' AND NOT (phase = 'submitted' OR submit_attempts > 0)) AS ahead,
                sum(points_reserved) FILTER (WHERE id <> $2 AND phase <> 'done') AS others
         FROM tasks WHERE client_id = c.id AND points_reserved <> 0) t ON true
       WHERE c.id = $1`,
      [clientId, around ?? "", priceKey],
    )
  ).rows[0] as Row | undefined;
  if (!r) return undefined;
  if (Number(r.unrolled) >= ROLL_UP_AT) void rollUpLedger(pool, clientId).catch(() => {});
  return {
    position: {
      charged: Number(r.charged),
      refunded: Number(r.refunded),
      reserved: Number(r.reserved),
      limit: r.credit_limit === null ? null : Number(r.credit_limit),
      revoked: r.revoked_at !== null,
    },
    reservations:
      around === null
        ? { inFlight: 0, ahead: 0, others: 0 }
        : { inFlight: Number(r.in_flight), ahead: Number(r.ahead), others: Number(r.others) },
    learnedPrice: r.learned_price === null ? null : Number(r.learned_price),
  };
}

/**
 * Folds the client's ledger rows not yet rolled up into its row's totals: one statement, its own
 * transaction. Two at once fold each row once (the second waits for the rows the first marks, then
 * finds them rolled up and leaves them); a reader sees the books before or after, never half.
 */
export async function rollUpLedger(pool: pg.Pool, clientId: string): Promise<void> {
  await pool.query(
    `WITH r AS (UPDATE credit_ledger SET rolled_up = true WHERE client_id = $1 AND NOT rolled_up RETURNING charged, refunded)
     UPDATE clients SET points_charged = points_charged + (SELECT coalesce(sum(charged), 0) FROM r),
                        points_refunded = points_refunded + (SELECT coalesce(sum(refunded), 0) FROM r)
      WHERE id = $1 AND EXISTS (SELECT 1 FROM r)`,
    [clientId],
  );
}

/**
 * A change of the client's books by a task's transition: its reservation is already on the task row
 * (the transition's patch), so only a charge or a refund is written, as a ledger row.
 */
export async function recordCharge(
  c: Queryable,
  clientId: string,
  taskId: string,
  change: { charged: number; refunded: number },
  at: number,
): Promise<void> {
  const values: unknown[] = [];
  const sql = chargeInsert(clientId, taskId, change, at, (v) => `$${values.push(v)}`);
  if (sql) await c.query(sql, values);
}

/**
 * recordCharge's ledger row as an INSERT whose values `bind` places (a step of a transition's one
 * statement: store.ts); null when there is neither a charge nor a refund.
 */
export function chargeInsert(
  clientId: string,
  taskId: string,
  change: { charged: number; refunded: number },
  at: number,
  bind: (value: unknown) => string,
): string | null {
  if (change.charged === 0 && change.refunded === 0) return null;
  return `INSERT INTO credit_ledger (client_id, task_id, charged, refunded, at, rolled_up)
    VALUES (${bind(clientId)}, ${bind(taskId)}, ${bind(change.charged)}, ${bind(change.refunded)}, ${bind(at)}, false)`;
}

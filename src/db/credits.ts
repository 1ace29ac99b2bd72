import { and, eq, sql } from "drizzle-orm";
import type { CreditPosition, ReservationsAround } from "../store/store.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { clients, creditLedger, learnedPrices, tasks } from "./sqlite/schema.js";

export function creditPosition(db: DbOrTx, clientId: string): CreditPosition | undefined {
  const row = db
    .select({
      charged: clients.pointsCharged,
      refunded: clients.pointsRefunded,
      reserved: clients.pointsReserved,
      limit: clients.creditLimit,
      revokedAt: clients.revokedAt,
    })
    .from(clients)
    .where(eq(clients.id, clientId))
    .get();
  if (!row) return undefined;
  return {
    charged: row.charged,
    refunded: row.refunded,
    reserved: row.reserved,
    limit: row.limit,
    revoked: row.revokedAt !== null,
  };
}

export interface CreditChange {
  charged: number;
  refunded: number;
  reserved: number;
}

/**
 * Applies a task's change of charge, refund and reservation to its client's totals, and appends
 * charges and refunds to the ledger. Runs in the transaction that changes the task.
 */
export function applyCreditChange(
  db: DbOrTx,
  clientId: string,
  taskId: string,
  change: CreditChange,
  at: number,
): void {
  if (change.charged === 0 && change.refunded === 0 && change.reserved === 0) return;
  db.update(clients)
    .set({
      pointsCharged: sql`${clients.pointsCharged} + ${change.charged}`,
      pointsRefunded: sql`${clients.pointsRefunded} + ${change.refunded}`,
      pointsReserved: sql`max(0, ${clients.pointsReserved} + ${change.reserved})`,
    })
    .where(eq(clients.id, clientId))
    .run();
  if (change.charged !== 0 || change.refunded !== 0) {
    db.insert(creditLedger).values({ clientId, taskId, charged: change.charged, refunded: change.refunded, at }).run();
  }
}

export function findLearnedPrice(db: DbOrTx, priceKey: string): number | null {
  const row = db
    .select({ points: learnedPrices.points })
    .from(learnedPrices)
    .where(eq(learnedPrices.priceKey, priceKey))
    .get();
  return row?.points ?? null;
}

export function learnPrice(db: DbOrTx, priceKey: string, points: number, at: number): void {
  db.insert(learnedPrices)
    .values({ priceKey, points, updatedAt: at })
    .onConflictDoUpdate({ target: learnedPrices.priceKey, set: { points, updatedAt: at } })
    .run();
}

/** The client's reservations seen from one of its waiting tasks (which is left out of every sum). */
export function reservationsAround(db: DbOrTx, clientId: string, taskId: string): ReservationsAround {
  const offered = sql`(${tasks.phase} = 'submitted' OR ${tasks.submitAttempts} > 0)`;
  const row = db
    .select({
      inFlight: sql<number>`coalesce(sum(CASE WHEN ${offered} THEN ${tasks.pointsReserved} ELSE 0 END), 0)`,
      ahead: sql<number>`coalesce(sum(CASE WHEN NOT ${offered} AND ${tasks.id} < ${taskId} THEN ${tasks.pointsReserved} ELSE 0 END), 0)`,
      others: sql<number>`coalesce(sum(${tasks.pointsReserved}), 0)`,
    })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), sql`${tasks.phase} <> 'done'`, sql`${tasks.id} <> ${taskId}`))
    .get();
  return { inFlight: row?.inFlight ?? 0, ahead: row?.ahead ?? 0, others: row?.others ?? 0 };
}

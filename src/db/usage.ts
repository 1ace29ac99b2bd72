import { and, eq, sql } from "drizzle-orm";
import type { DbOrTx } from "./tx.js";
import { tasks } from "./schema.js";

/** Credits a client has spent: charged minus refunded, over its tasks. */
export function clientSpend(db: DbOrTx, clientId: string): number {
  const row = db
    .select({ spent: sql<number>`coalesce(sum(coalesce(${tasks.pointsCharged}, 0) - coalesce(${tasks.pointsRefunded}, 0)), 0)` })
    .from(tasks)
    .where(eq(tasks.clientId, clientId))
    .get();
  return row?.spent ?? 0;
}

export interface ClientUsage {
  tasks: Record<string, number>;
  points_charged: number;
  points_refunded: number;
}

export function clientUsage(db: DbOrTx, clientId: string): ClientUsage {
  const rows = db
    .select({
      status: tasks.status,
      n: sql<number>`count(*)`,
      charged: sql<number>`coalesce(sum(${tasks.pointsCharged}), 0)`,
      refunded: sql<number>`coalesce(sum(${tasks.pointsRefunded}), 0)`,
    })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId)))
    .groupBy(tasks.status)
    .all();
  const usage: ClientUsage = { tasks: { queued: 0, processing: 0, succeeded: 0, failed: 0, canceled: 0 }, points_charged: 0, points_refunded: 0 };
  for (const row of rows) {
    usage.tasks[row.status] = row.n;
    usage.points_charged += row.charged;
    usage.points_refunded += row.refunded;
  }
  return usage;
}

import { eq, sql } from "drizzle-orm";
import type { DbOrTx } from "./sqlite/tx.js";
import { tasks } from "./sqlite/schema.js";

/** A client's retained tasks by status (credits come from the ledger: db/credits.ts). */
export function taskCounts(db: DbOrTx, clientId: string): Record<string, number> {
  const rows = db
    .select({ status: tasks.status, n: sql<number>`count(*)` })
    .from(tasks)
    .where(eq(tasks.clientId, clientId))
    .groupBy(tasks.status)
    .all();
  const counts: Record<string, number> = { queued: 0, processing: 0, succeeded: 0, failed: 0, canceled: 0 };
  for (const row of rows) counts[row.status] = row.n;
  return counts;
}

import { and, eq, gt, lt } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { upstreamAccounts, upstreamReads } from "./sqlite/schema.js";

import type { UpstreamAccountRow } from "../store/rows.js";

export type { UpstreamAccountRow };

export function getAccountState(db: Db, id: string): UpstreamAccountRow | undefined {
  return db.select().from(upstreamAccounts).where(eq(upstreamAccounts.id, id)).get();
}

export function upsertAccountState(
  db: Db,
  id: string,
  patch: Partial<typeof upstreamAccounts.$inferInsert>,
  now: number,
): void {
  db.insert(upstreamAccounts)
    .values({ id, updatedAt: now, ...patch })
    .onConflictDoUpdate({ target: upstreamAccounts.id, set: { ...patch, updatedAt: now } })
    .run();
}

export function recordRead(db: DbOrTx, account: string, at: number): void {
  db.insert(upstreamReads).values({ account, at }).run();
}

export function readsSince(db: DbOrTx, account: string, since: number): number[] {
  return db
    .select({ at: upstreamReads.at })
    .from(upstreamReads)
    .where(and(eq(upstreamReads.account, account), gt(upstreamReads.at, since)))
    .orderBy(upstreamReads.at)
    .all()
    .map((r) => r.at);
}

export function pruneReads(db: Db, account: string, before: number): void {
  db.delete(upstreamReads)
    .where(and(eq(upstreamReads.account, account), lt(upstreamReads.at, before)))
    .run();
}

import { and, eq, sql } from "drizzle-orm";
import { retryingEvent } from "./kit/delivery-failing.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { events } from "./sqlite/schema.js";

/** The dashboard's own event read: how many of the client's events are retrying (see retryingEvent). */
export function countRetryingEvents(db: DbOrTx, clientId: string): number {
  return db
    .select({ n: sql<number>`count(*)` })
    .from(events)
    .where(and(eq(events.clientId, clientId), sql.raw(retryingEvent("events"))))
    .get()!.n;
}

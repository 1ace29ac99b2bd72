import { and, asc, eq, sql } from "drizzle-orm";
import type { Db } from "./open.js";
import { clients, events } from "./schema.js";

/**
 * Feed positions on SQLite, handed out when the feed is read, as on PostgreSQL (see
 * src/db/pg/feed-positions.ts): an event is written with `client_seq = 0` ("not yet placed"), so
 * writing it touches no client row; the reader places the client's unplaced events, oldest `seq`
 * first, after the highest position handed out so far (`clients.event_seq`, kept so a pruned
 * event's position is never handed out again), at most `limit` per read. One writer at a time on
 * SQLite: the placement's transaction sees every event committed before it.
 */
export function placeInFeed(db: Db, clientId: string, limit: number): void {
  const waiting = db
    .select({ id: events.id })
    .from(events)
    .where(and(eq(events.clientId, clientId), eq(events.clientSeq, 0)))
    .limit(1)
    .get();
  if (!waiting) return;
  db.transaction((tx) => {
    const client = tx
      .select({
        top: sql<number>`max(${clients.eventSeq}, coalesce((SELECT max(client_seq) FROM events WHERE client_id = ${clientId}), 0))`,
      })
      .from(clients)
      .where(eq(clients.id, clientId))
      .get();
    if (!client) return;
    // The same LIMIT as the feed's own read: a limit the store refuses is refused here alike.
    const todo = tx
      .select({ id: events.id })
      .from(events)
      .where(and(eq(events.clientId, clientId), eq(events.clientSeq, 0)))
      .orderBy(asc(events.seq))
      .limit(limit)
      .all();
    let top = client.top;
    for (const { id } of todo) tx.update(events).set({ clientSeq: ++top }).where(eq(events.id, id)).run();
    tx.update(clients).set({ eventSeq: top }).where(eq(clients.id, clientId)).run();
  });
}

import { and, asc, eq, inArray, isNotNull, ne, sql } from "drizzle-orm";
import { endpointDeliveries, NOT_IN_FEED } from "../../store/endpoint-fanout.js";
import type { WebhookEndpointStore } from "../../store/store.js";
import type { NewEventRow, WebhookEndpointRow } from "../../store/rows.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { insertEveryColumn, prepared } from "./prepared.js";
import { events, webhookEndpoints } from "./schema.js";

/**
 * The WebhookEndpointStore on SQLite: a client's subscribed URLs (not the delivery keys' health,
 * which is key-health.ts), and the fan-out of each event to them (fanOutEvent).
 */
export function sqliteWebhookEndpoints(s: SqliteContext): WebhookEndpointStore {
  const db = s.database.db;
  return {
    create: async (row, max) =>
      db.transaction((tx) => {
        const n =
          tx
            .select({ n: sql<number>`count(*)` })
            .from(webhookEndpoints)
            .where(eq(webhookEndpoints.clientId, row.clientId))
            .get()?.n ?? 0;
        if (n >= max) return null;
        return tx.insert(webhookEndpoints).values(row).returning().all()[0]!;
      }),
    list: async (clientId) => endpointsOf(db, clientId),
    find: async (clientId, id) =>
      db
        .select()
        .from(webhookEndpoints)
        .where(and(eq(webhookEndpoints.clientId, clientId), eq(webhookEndpoints.id, id)))
        .all()[0],
    deliveriesOfTasks: async (taskIds) =>
      taskIds.length === 0
        ? []
        : db
            .select()
            .from(events)
            .where(and(inArray(events.taskId, taskIds), isNotNull(events.endpointId)))
            .orderBy(asc(events.taskId), asc(events.sequence), asc(events.seq))
            .all(),
    requeueDeliveries: async (ids, round) =>
      ids.length === 0
        ? 0
        : db
            .update(events)
            .set(round)
            .where(and(inArray(events.id, ids), isNotNull(events.endpointId), ne(events.deliveryStatus, "ended")))
            .run().changes,
    remove: async (clientId, id, _now) =>
      db.transaction((tx) => {
        const gone = tx
          .delete(webhookEndpoints)
          .where(and(eq(webhookEndpoints.clientId, clientId), eq(webhookEndpoints.id, id)))
          .returning({ host: webhookEndpoints.destinationHost })
          .all()[0];
        if (!gone) return false;
        // Through events_key_due_idx (the endpoint's key), then its own rows: a lease still out can
        // no longer record over them (the claim token goes with the status). Failed ones end too:
        // a recover must not send them to a URL no longer subscribed.
        tx.update(events)
          .set({ deliveryStatus: "ended", nextAttemptAt: null, claimToken: null, claimedUntil: null })
          .where(
            and(
              eq(events.clientId, clientId),
              eq(events.destinationHost, gone.host),
              inArray(events.deliveryStatus, ["pending", "failed"]),
              eq(events.endpointId, id),
            ),
          )
          .run();
        return true;
      }),
  };
}

/** The client's endpoints, oldest first (prepared: every event write of the client reads them). */
export function endpointsOf(db: Db, clientId: string): WebhookEndpointRow[] {
  return prepared(db, "webhookEndpoints.ofClient", () =>
    db
      .select()
      .from(webhookEndpoints)
      .where(eq(webhookEndpoints.clientId, sql.placeholder("clientId")))
      .orderBy(asc(webhookEndpoints.createdAt), asc(webhookEndpoints.id))
      .prepare(),
  ).all({ clientId });
}

/**
 * The event's rows for the client's endpoints subscribed to its type, written inside the caller's
 * open transaction (the one that writes the event). The feed lists the event once, by its own row:
 * these are written at NOT_IN_FEED, a position the feed never hands out nor reads.
 */
export function fanOutEvent(
  db: Db,
  event: Omit<NewEventRow, "clientSeq">,
  endpoints: readonly WebhookEndpointRow[] = endpointsOf(db, event.clientId),
): void {
  if (endpoints.length === 0) return;
  for (const row of endpointDeliveries(event, endpoints))
    insertEveryColumn(db, events, { ...row, clientSeq: NOT_IN_FEED }, ["seq"]);
}

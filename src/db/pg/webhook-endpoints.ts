import { endpointDeliveries, NOT_IN_FEED } from "../../store/endpoint-fanout.js";
import type { WebhookEndpointStore } from "../../store/store.js";
import type { NewEventRow, WebhookEndpointRow } from "../../store/rows.js";
import type { PgContext } from "./context.js";
import { CHANNEL, E, mapRow, type Queryable } from "./mapping.js";

/** Advisory lock namespace of a client's endpoint count (the second key is hashtext of the client id). */
const ENDPOINT_COUNT_LOCK = 0x67_72_77; // "grw"

/**
 * The WebhookEndpointStore on PostgreSQL (SQLite's is db/sqlite/webhook-endpoints.ts): a client's
 * subscribed URLs, and the fan-out of each event to them (fanOutEvent). Not the delivery keys'
 * health, which is endpoints.ts.
 */
export function pgWebhookEndpoints(s: PgContext): WebhookEndpointStore {
  const { q, one } = s;
  return {
    create: (row, max) =>
      s.tx(async (c) => {
        // Two creations of one client at once cannot both see room for themselves.
        await c.query("SELECT pg_advisory_xact_lock($1, hashtext($2))", [ENDPOINT_COUNT_LOCK, row.clientId]);
        const n = Number(
          (await c.query("SELECT count(*) AS n FROM webhook_endpoints WHERE client_id = $1", [row.clientId])).rows[0]
            ?.n ?? 0,
        );
        if (n >= max) return null;
        const r = await c.query(
          `INSERT INTO webhook_endpoints (id, client_id, url, destination_host, events, description, headers, kind, destination, created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *`,
          [
            row.id,
            row.clientId,
            row.url,
            row.destinationHost,
            row.events,
            row.description ?? null,
            row.headers ?? null,
            row.kind ?? "webhook",
            row.destination ?? null,
            row.createdAt,
          ],
        );
        return mapRow<WebhookEndpointRow>(r.rows[0]!);
      }),
    list: async (clientId) => endpointsOf(s.pool, q, clientId),
    find: async (clientId, id) => {
      const r = await one("SELECT * FROM webhook_endpoints WHERE client_id = $1 AND id = $2", [clientId, id]);
      return r ? mapRow<WebhookEndpointRow>(r) : undefined;
    },
    deliveriesOfTasks: async (taskIds) =>
      taskIds.length === 0
        ? []
        : E.rows(
            await q(
              "SELECT * FROM events WHERE task_id = ANY($1::text[]) AND endpoint_id IS NOT NULL ORDER BY task_id, sequence, seq",
              [taskIds],
            ),
          ),
    requeueDeliveries: async (ids, round) => {
      if (ids.length === 0) return 0;
      const set = E.set(round, 2);
      const n =
        (
          await s.pool.query(
            `UPDATE events SET ${set.sql} WHERE id = ANY($1::text[]) AND endpoint_id IS NOT NULL AND delivery_status <> 'ended'`,
            [ids, ...set.values],
          )
        ).rowCount ?? 0;
      if (n > 0) await s.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
      return n;
    },
    remove: (clientId, id, _now) =>
      s.tx(async (c) => {
        const gone = (
          await c.query("DELETE FROM webhook_endpoints WHERE client_id = $1 AND id = $2 RETURNING destination_host", [
            clientId,
            id,
          ])
        ).rows[0] as { destination_host: string } | undefined;
        if (!gone) return false;
        // Through events_key_due_idx (the endpoint's key); a lease still out can no longer record over
        // them. Failed ones end too: a recover must not send them to a URL no longer subscribed.
        await c.query(
          `UPDATE events SET delivery_status = 'ended', next_attempt_at = NULL, claim_token = NULL, claimed_until = NULL
           WHERE client_id = $1 AND destination_host = $2 AND delivery_status IN ('pending', 'failed') AND endpoint_id = $3`,
          [clientId, gone.destination_host, id],
        );
        return true;
      }),
  };
}

export async function endpointsOf(on: Queryable, q: PgContext["q"], clientId: string): Promise<WebhookEndpointRow[]> {
  return (await q("SELECT * FROM webhook_endpoints WHERE client_id = $1 ORDER BY created_at, id", [clientId], on)).map(
    (r) => mapRow<WebhookEndpointRow>(r),
  );
}

/**
 * The event's rows for the client's endpoints subscribed to its type, on the connection of the
 * transaction that writes the event. The feed lists the event once, by its own row: these are
 * written at NOT_IN_FEED, a position the feed never hands out nor reads.
 */
export async function fanOutEvent(
  c: Queryable,
  q: PgContext["q"],
  event: Omit<NewEventRow, "clientSeq">,
  endpoints?: readonly WebhookEndpointRow[],
): Promise<void> {
  const to = endpoints ?? (await endpointsOf(c, q, event.clientId));
  if (to.length === 0) return;
  for (const row of endpointDeliveries(event, to)) {
    const ins = E.insert("events", { ...row, clientSeq: NOT_IN_FEED });
    await c.query(ins.sql, ins.values);
  }
}

import type { NewEventRow, WebhookEndpointRow } from "./rows.js";

/** The task event types an endpoint may subscribe to, and what it gets when it names none. */
export const ENDPOINT_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"] as const;
export const DEFAULT_ENDPOINT_EVENTS = ["task.succeeded", "task.failed", "task.canceled"] as const;

/**
 * The feed position of an endpoint's delivery row: below every position the feed hands out (and
 * not 0, "not yet placed"), so the feed lists each event once, by the row of the task's callback.
 */
export const NOT_IN_FEED = -1;

/** Every event type some endpoint of the list subscribes to. */
export function subscribedTypes(endpoints: readonly WebhookEndpointRow[]): string[] {
  return [...new Set(endpoints.flatMap((e) => JSON.parse(e.events) as string[]))];
}

/** An endpoint's delivery row id: the event's id and the endpoint's, so one event reaches one endpoint once. */
export const endpointDeliveryId = (eventId: string, endpointId: string): string => `${eventId}_${endpointId}`;

/**
 * The rows one event adds for the client's endpoints subscribed to its type: the same body, sent
 * under the event's id as `webhook-id`, each to its endpoint's URL with its endpoint's headers, due
 * when the task's own callback is (or at once when the task has none). Both drivers write these in
 * the transaction that writes the event.
 */
export function endpointDeliveries<E extends Omit<NewEventRow, "clientSeq">>(
  event: E,
  endpoints: readonly WebhookEndpointRow[],
): E[] {
  const out: E[] = [];
  for (const ep of endpoints) {
    if (!(JSON.parse(ep.events) as string[]).includes(event.type)) continue;
    out.push({
      ...event,
      id: endpointDeliveryId(event.id, ep.id),
      webhookId: event.id,
      endpointId: ep.id,
      callbackUrl: ep.url,
      destinationHost: ep.destinationHost,
      callbackHeaders: ep.headers,
      deliveryStatus: "pending",
      nextAttemptAt: event.nextAttemptAt ?? event.createdAt,
    });
  }
  return out;
}

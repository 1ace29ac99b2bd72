import type { DestinationMessage } from "../../destinations/index.js";
import { WEBHOOK_KIND } from "../../destinations/http.js";
import { kindOfAddress } from "../../destinations/queues.js";
import type { ClientRow, ClaimedEvent } from "../../store/rows.js";
import { signedMessage } from "../../webhooks/outgoing.js";

/**
 * One attempt's message: the event signed for its client at `at`, before it reaches the destination
 * port. Every kind gets the same signed parts, so the signing stays out of the kinds. An endpoint's
 * row is sent under its event's id: every destination of one event gets the same webhook-id.
 */
export function deliveryMessage(
  event: ClaimedEvent,
  client: ClientRow,
  at: number,
  encryptionKey: Buffer | null,
): DestinationMessage {
  return signedMessage({
    // A callback URL is the `webhook` kind; an endpoint's stored address names its kind (destinations/queues.ts).
    target: {
      kind: event.endpointId && event.callbackUrl ? kindOfAddress(event.callbackUrl) : WEBHOOK_KIND,
      address: event.callbackUrl ?? "",
      tenant: event.clientId,
      endpoint: event.endpointId,
    },
    client,
    id: event.webhookId ?? event.id,
    at,
    body: event.payload,
    encryptionKey,
    callbackHeaders: event.callbackHeaders,
    type: event.type,
    taskId: event.taskId,
  });
}

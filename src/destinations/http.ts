import { httpHeaders } from "../webhooks/outgoing.js";
import type { WebhookSender } from "../webhooks/sender.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import { Destinations, type DestinationKind } from "./index.js";

/** The `webhook` kind: the endpoint's callback URL. */
export const WEBHOOK_KIND = "webhook";

/**
 * The `webhook` kind: one HTTP POST of the message, its parts as Standard Webhooks headers, on the
 * tenant's own connections (webhooks/sender.ts, whose DNS lookup guards every connection). The
 * address guard before it is the callback-URL check intake applied, asked again under today's
 * configuration.
 */
export function httpDestination(
  sender: Pick<WebhookSender, "send">,
  opts: { allowPrivateNetworks: boolean },
): DestinationKind {
  return {
    refuse: (address) => {
      const checked = validateCallbackUrl(address, opts);
      return checked.ok ? null : checked.reason;
    },
    destination: {
      send: (message, deadline) =>
        sender.send({
          url: message.target.address,
          headers: httpHeaders({
            id: message.eventId,
            timestamp: message.timestamp,
            signature: message.signature,
            contentType: message.contentType,
            headers: message.headers,
            traceparent: message.traceparent,
            tracestate: message.tracestate,
          }),
          body: message.body,
          timeoutMs: deadline.timeoutMs,
          tenant: message.target.tenant,
        }),
    },
  };
}

/** A registry of the `webhook` kind alone: for a worker built without the relay's registry (tests, benchmarks). */
export function webhookDestinations(
  sender: Pick<WebhookSender, "send">,
  opts: { allowPrivateNetworks: boolean },
): Destinations {
  return new Destinations().register(WEBHOOK_KIND, httpDestination(sender, opts));
}

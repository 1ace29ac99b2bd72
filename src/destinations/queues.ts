import { LRUCache } from "lru-cache";
import { sendResult } from "../webhooks/sender.js";
import { lazy } from "../lazy.js";
import { hostnameRefusal, type Resolver } from "../net/address-guard.js";
import type { AmqpTarget } from "./amqp.js";
import type { QueueClientOptions } from "./broker-client.js";
import type { Destination, DestinationKind, DestinationMessage } from "./index.js";
import type { NatsTarget } from "./nats.js";
import type { QueueMessage } from "./queue-message.js";
import type { SqsTarget } from "./sqs.js";

/**
 * The queue kinds (docs/destinations.md): `amqp`, `nats` and `sqs`, each a Destination over its
 * broker client. An endpoint of a queue kind is stored with an address that names its kind and
 * broker without credentials (`amqp://host:port/vhost`, `nats://host:port`,
 * `sqs+https://sqs.region.amazonaws.com/account/queue`); its settings and credentials are sealed
 * with the endpoint, and looked up by the endpoint's id when a message is sent (`targets`).
 */
export const QUEUE_KINDS = ["amqp", "nats", "sqs"] as const;
export type QueueKind = (typeof QUEUE_KINDS)[number];

export type QueueTarget =
  | { kind: "amqp"; amqp: AmqpTarget }
  | { kind: "nats"; nats: NatsTarget }
  | { kind: "sqs"; sqs: SqsTarget };

/** The kind a stored address names: a queue kind by its scheme, else `webhook`. */
export function kindOfAddress(address: string): string {
  const scheme = address.slice(0, address.indexOf(":")).toLowerCase();
  if (scheme === "amqp" || scheme === "amqps") return "amqp";
  if (scheme === "nats" || scheme === "tls") return "nats";
  if (scheme === "sqs+https" || scheme === "sqs+http") return "sqs";
  return "webhook";
}

/** The queue headers of a signed message: the Standard Webhooks three, content-type, and the trace context when there is one. */
export function queueMessage(message: DestinationMessage): QueueMessage {
  const headers: Record<string, string> = {
    "webhook-id": message.eventId,
    "webhook-timestamp": String(message.timestamp),
    "webhook-signature": message.signature,
    "content-type": message.contentType,
  };
  if (message.traceparent) headers.traceparent = message.traceparent;
  if (message.tracestate) headers.tracestate = message.tracestate;
  return {
    tenant: message.target.tenant,
    id: message.eventId,
    type: message.type,
    taskId: message.taskId ?? message.eventId,
    body: message.body,
    headers,
  };
}

/** Why a broker address may not be used on a relay that refuses private networks, or null. */
function brokerRefusal(address: string): string | null {
  try {
    const host = new URL(address).hostname;
    return host === "" ? "the broker address has no host" : hostnameRefusal(host);
  } catch {
    return "the broker address does not parse";
  }
}

export interface QueueKindsOptions extends QueueClientOptions {
  /** The endpoint's settings and credentials, opened, by client and endpoint id; null when it is gone. */
  targets: (tenant: string, endpointId: string) => Promise<QueueTarget | null>;
  resolve?: Resolver;
}

/** The three queue kinds, ready to register, and a close for shutdown. */
export function queueKinds(opts: QueueKindsOptions): {
  kinds: Record<QueueKind, DestinationKind>;
  close: () => Promise<void>;
} {
  // Each kind's client library is loaded at its first message: a relay without queue endpoints never loads them.
  const amqp = lazy(async () => new (await import("./amqp.js")).AmqpDestination(opts));
  const nats = lazy(async () => new (await import("./nats.js")).NatsDestination(opts));
  const sqs = lazy(async () => new (await import("./sqs.js")).SqsDestination(opts));
  // Asked before every publish, of a handful of addresses under one configuration: judged once each.
  const refusals = new LRUCache<string, { refusal: string | null }>({ max: 1_000 });
  const refuse = (address: string): string | null => {
    if (opts.allowPrivateNetworks) return null;
    let known = refusals.get(address);
    if (known === undefined) {
      known = { refusal: brokerRefusal(address) };
      refusals.set(address, known);
    }
    return known.refusal;
  };
  const destination = (kind: QueueKind): Destination => ({
    send: async (message, deadline) => {
      const endpoint = message.target.endpoint;
      let target: QueueTarget | null = null;
      try {
        if (endpoint) target = await opts.targets(message.target.tenant, endpoint);
      } catch {
        target = null;
      }
      if (!target || target.kind !== kind)
        return sendResult({ error: `the ${kind} endpoint's settings could not be read (endpoint removed?)` });
      const queued = queueMessage(message);
      // The client once loaded, taken as it is: no promise and no wait for it per publish.
      if (target.kind === "amqp")
        return (amqp.peek() ?? (await amqp.get())).publish(target.amqp, queued, deadline.timeoutMs);
      if (target.kind === "nats")
        return (nats.peek() ?? (await nats.get())).publish(target.nats, queued, deadline.timeoutMs);
      return (sqs.peek() ?? (await sqs.get())).publish(target.sqs, queued, deadline.timeoutMs);
    },
  });
  return {
    kinds: {
      amqp: { refuse, destination: destination("amqp") },
      nats: { refuse, destination: destination("nats") },
      sqs: { refuse, destination: destination("sqs") },
    },
    close: async () => {
      // A client whose library was still loading is closed too, once made: nothing outlives the close.
      await Promise.all([amqp, nats, sqs].map(async (client) => (await client.loaded())?.close()));
    },
  };
}

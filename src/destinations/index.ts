import { sendResult, type SendResult } from "../webhooks/sender.js";

/**
 * The destination port (docs/architecture.md, "Destinations"): where one signed message goes, by
 * the endpoint's kind. A kind is one file that registers a `Destination` here (`http.ts` for
 * `webhook`, Outpost's destregistry shape); everything else about an attempt sits around the port
 * and is the same for every kind: the signing (the message arrives signed), the address guard
 * (each kind's `refuse`, asked before every send), the deadline, the attempt record, the retry
 * schedule, the circuit breaker and the fair pool (workers/dispatcher.ts).
 */

/** Where a message goes. */
export interface DestinationTarget {
  /** The endpoint's kind, the registry's key (`webhook` today). */
  kind: string;
  /** Its address: the callback URL for `webhook`, a broker URL for a queue kind. */
  address: string;
  /** Whose message (the client id): a kind keeps each tenant's connections apart. */
  tenant: string;
  /** The endpoint it is for (null: the task's own callback URL): a queue kind reads its sealed settings by it. */
  endpoint?: string | null;
}

/**
 * One signed message, as every kind needs it: the same body bytes and the same Standard Webhooks
 * headers whatever carries them (an HTTP POST, AMQP headers, NATS headers, SQS attributes), so a
 * consumer verifies any of them with one library.
 */
export interface DestinationMessage {
  target: DestinationTarget;
  /** `webhook-id`: the event's id (an endpoint's row is sent under its event's id). */
  eventId: string;
  /** `webhook-timestamp`: whole seconds, the signed content's timestamp. */
  timestamp: number;
  /** The body's exact text (UTF-8 JSON), byte for byte what the signature covers. */
  body: string;
  /** `webhook-signature`: one or more `v1,`/`v1a,` signatures, space-separated. */
  signature: string;
  contentType: string;
  /** The event's type (`task.succeeded`, …): a queue kind routes by it. */
  type: string;
  /** The task the event is about (a FIFO queue groups by it). */
  taskId: string | null;
  /** The client's and the task's callback headers (lower-case names, reserved ones dropped); never override the ones above. */
  headers: Record<string, string>;
  /** W3C trace context for the attempt, outside the signed content (set when the task carries one). */
  traceparent?: string;
  tracestate?: string;
}

/** How long one send may take, all of it (connect, write, answer); each kind enforces it on its own I/O. */
export interface SendDeadline {
  timeoutMs: number;
}

/**
 * What one send learned: delivered (`ok`), or why not. The HTTP fields stay null for a kind that
 * has none (a broker's answer goes in `responseBody`); `gone` ends the event's retries.
 */
export type DeliveryOutcome = SendResult;

/** One kind's sender. Never throws: every failure is an outcome. */
export interface Destination {
  send(message: DestinationMessage, deadline: SendDeadline): Promise<DeliveryOutcome>;
}

/** What a kind registers: its sender and its address guard. */
export interface DestinationKind {
  destination: Destination;
  /**
   * Why this address may not be sent to now (a private network, a scheme the kind does not
   * take), or null. Asked before every send, since the address was stored under an earlier
   * configuration; a kind that resolves names still guards each connection itself.
   */
  refuse(address: string): string | null;
}

/** The registered kinds, keyed by the endpoint's kind. */
export class Destinations {
  private readonly kinds = new Map<string, DestinationKind>();

  register(kind: string, entry: DestinationKind): this {
    if (this.kinds.has(kind)) throw new Error(`destination kind ${kind} is registered twice`);
    this.kinds.set(kind, entry);
    return this;
  }

  /** The registered kinds' names. */
  names(): string[] {
    return [...this.kinds.keys()];
  }

  /**
   * Sends one message through its kind, behind the kind's address guard: a refused address is a
   * blocked attempt with nothing sent, an unknown kind a failed one. Never throws.
   */
  async send(message: DestinationMessage, deadline: SendDeadline): Promise<DeliveryOutcome> {
    const entry = this.kinds.get(message.target.kind);
    if (!entry) return sendResult({ error: `no destination of kind ${message.target.kind}` });
    const refusal = entry.refuse(message.target.address);
    if (refusal !== null) return sendResult({ blocked: true, error: `blocked: ${refusal}` });
    return entry.destination.send(message, deadline);
  }
}

import { deadlineIn } from "../net/deadline.js";
import { sendResult, type SendResult } from "../webhooks/sender.js";

/**
 * What a queue destination publishes (docs/destinations.md, "The message is the webhook"): the
 * HTTP webhook's body bytes, under the headers a Standard Webhooks verifier reads. AMQP and NATS
 * carry them as message headers, SQS as message attributes.
 */
export interface QueueMessage {
  /** The client the message is for: connections are per client and broker. */
  tenant: string;
  /** The `webhook-id`: NATS's `Nats-Msg-Id`, SQS FIFO's de-duplication id. */
  id: string;
  /** The event type (`task.succeeded`): the default AMQP routing key and NATS subject. */
  type: string;
  /** The task: an SQS FIFO queue's message group, so a task's events stay in order. */
  taskId: string;
  body: string;
  /** `webhook-id`, `webhook-timestamp`, `webhook-signature`, `content-type`, and `traceparent` when the task has one. */
  headers: Record<string, string>;
}

/** The headers a queue message carries, and nothing else of an HTTP attempt's (no client-chosen header names). */
export const QUEUE_HEADER_NAMES = [
  "webhook-id",
  "webhook-timestamp",
  "webhook-signature",
  "content-type",
  "traceparent",
] as const;

/** The queue headers among an HTTP attempt's headers (outgoingHeaders), content-type always set. */
export function queueHeaders(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = { "content-type": "application/json" };
  for (const name of QUEUE_HEADER_NAMES) {
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/** A broker's confirmation: a delivered attempt, the broker's answer kept in the attempt log. */
export function confirmed(startedAt: number, now: number, answer: string): SendResult {
  return sendResult({ ok: true, latencyMs: Math.max(0, Math.round(now - startedAt)), responseBody: answer });
}

/**
 * A failed publish: retryable like any HTTP failure (a deadline that passed, a dropped connection,
 * a refusal). `blocked` when the address guard refused the broker's host, so nothing was sent.
 */
export function publishFailed(startedAt: number, now: number, err: unknown, blocked = false): SendResult {
  const deadline = deadlineIn(err);
  const message = deadline
    ? deadline.message
    : err instanceof Error
      ? err.message
      : typeof err === "string"
        ? err
        : "unknown error";
  return sendResult({ latencyMs: Math.max(0, Math.round(now - startedAt)), error: message.slice(0, 500), blocked });
}

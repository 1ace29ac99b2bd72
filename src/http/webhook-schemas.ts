import { OpenAPIHono, z } from "@hono/zod-openapi";
import { TASK_EVENT_TYPES } from "../core/transition.js";
import { TASK_STATUSES } from "../statuses.js";
import { TaskDataSchema } from "./schemas.js";

/**
 * The body of every message the relay sends (docs/contract.md, "Receivers"), as OpenAPI `webhooks` entries: one per
 * event type, exact (no field left out, none added unannounced), so `openapi-typescript` and the
 * like generate real types for receivers. A test validates every body the test suite's receivers
 * get against these, with ajv (test/helpers/receiver.ts).
 */
const EventId = z
  .string()
  .regex(/^evt_[0-9a-z]{26}$/)
  .openapi({
    description: "Equals the webhook-id header (the same on every retry): deduplicate on it.",
    example: "evt_01jf3y8k2m9q7r5t3v1w0x6z4a",
  });
const Timestamp = z.string().openapi({
  description: "When the event was written (ISO-8601, UTC).",
  example: "2026-01-01T12:00:00.000Z",
  format: "date-time",
});
const Sample = z
  .literal(true)
  .optional()
  .openapi({ description: "Present (true) only on samples sent by POST /openapi/v1/webhooks/test." });

const UsageSchema = z.object({ points_charged: z.number().nullable(), points_refunded: z.number().nullable() });

/** `data` of a task event: the task as GET /openapi/v1/tasks/{id} shows it, flattened, with the event's place in the task's order. */
function taskEventData(status: (typeof TASK_STATUSES)[number]) {
  return z.strictObject({
    ...TaskDataSchema.shape,
    status: z.literal(status),
    output:
      status === "succeeded"
        ? z
            .record(z.string(), z.unknown())
            .nullable()
            .openapi({ description: "The upstream's output, verbatim: the URLs of the generated image(s) or video." })
        : z.null().openapi({ description: "Only a succeeded task has output." }),
    usage: UsageSchema,
    sequence: z
      .number()
      .int()
      .min(1)
      .openapi({ description: "1, 2, … per task: events of one task are delivered in this order." }),
    previous_status: z.enum(TASK_STATUSES),
    error: z
      .object({
        code: z.string(),
        message: z.string(),
        request_id: z.string().nullable(),
        message_truncated: z.literal(true).optional().openapi({
          description:
            "Present (true) when the message was cut: stored cut (over 16 KiB), or cut to keep the body within 256 KiB.",
        }),
      })
      .nullable(),
    output_omitted: z.literal(true).optional().openapi({
      description:
        "Present (true) when the output would take the body over 256 KiB (serialized UTF-8): output is null here; read it with GET /openapi/v1/tasks/{id}.",
    }),
    files_truncated: z.literal(true).optional().openapi({
      description:
        "Present (true) when files were left out, from the end, to keep the body within 256 KiB; GET /openapi/v1/tasks/{id} lists them all.",
    }),
    sample: Sample,
  });
}

function envelope<T extends string, D extends z.ZodType>(type: T, data: D, name: string) {
  return z.strictObject({ id: EventId, type: z.literal(type), timestamp: Timestamp, data }).openapi(name);
}

const pascal = (type: string) =>
  type
    .split(/[._]/)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join("");

const Host = z.string().openapi({ description: "hostname:port of the callback URL", example: "hooks.example.com:443" });

export const WEBHOOK_BODIES: Record<string, z.ZodType> = {
  ...Object.fromEntries(
    TASK_EVENT_TYPES.map((type) => [
      type,
      envelope(
        type,
        taskEventData(type.slice("task.".length) as (typeof TASK_STATUSES)[number]),
        `${pascal(type)}Event`,
      ),
    ]),
  ),
  ping: envelope("ping", z.strictObject({ client_id: z.string(), message: z.string(), sample: Sample }), "PingEvent"),
  "endpoint.failing": envelope(
    "endpoint.failing",
    z.strictObject({
      host: Host,
      failing_since: Timestamp.openapi({ description: "First failure after the host's last 2xx" }),
      attempts: z.number().int(),
      pending_events: z.number().int(),
      last_error: z.string().nullable(),
      sample: Sample,
    }),
    "EndpointFailingEvent",
  ),
  "endpoint.recovered": envelope(
    "endpoint.recovered",
    z.strictObject({ host: Host, failing_since: Timestamp, recovered_at: Timestamp, sample: Sample }),
    "EndpointRecoveredEvent",
  ),
  "delivery.exhausted": envelope(
    "delivery.exhausted",
    z.strictObject({
      event_id: z.string(),
      task_id: z.string(),
      type: z.enum(TASK_EVENT_TYPES),
      host: Host,
      attempts: z.number().int(),
      last_error: z.string().nullable(),
      sample: Sample,
    }),
    "DeliveryExhaustedEvent",
  ),
};

const DESCRIPTIONS: Record<string, string> = {
  "task.processing": "The upstream started the task (only when callback_events asks for it).",
  "task.succeeded": "The task ended with output and usage.",
  "task.failed": "The task ended failed; data.error says why (the upstream's code, message and request_id).",
  "task.canceled": "The task was canceled before it was submitted upstream (never charged).",
  ping: "A test event from POST /openapi/v1/webhooks/test.",
  "endpoint.failing":
    "Sent to notification_url: one of your callback hosts has answered no 2xx for WEBHOOK_FAILING_NOTICE_AFTER.",
  "endpoint.recovered": "Sent to notification_url: a host that was reported failing answered 2xx again.",
  "delivery.exhausted": "Sent to notification_url: an event's last scheduled attempt failed (it stays redeliverable).",
};

const SIGNED_HEADERS = z.object({
  "webhook-id": z.string().openapi({ param: { name: "webhook-id", in: "header" } }),
  "webhook-timestamp": z
    .string()
    .openapi({ param: { name: "webhook-timestamp", in: "header" }, description: "Unix seconds of this attempt" }),
  "webhook-signature": z.string().openapi({
    param: { name: "webhook-signature", in: "header" },
    description:
      'Space-separated: v1,<base64 HMAC-SHA256> (hmac) or v1a,<base64 Ed25519> (ed25519) of "{webhook-id}.{webhook-timestamp}.{body}"; two during a key rotation.',
  }),
});

/** Adds a `webhooks` entry per event type to an app's OpenAPI document. */
export function registerWebhookDocs(app: OpenAPIHono<any>): void {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  for (const [type, schema] of Object.entries(WEBHOOK_BODIES)) {
    app.openAPIRegistry.registerWebhook({
      method: "post",
      path: type,
      operationId: `on${pascal(type)}`,
      summary: type,
      description: DESCRIPTIONS[type],
      tags: ["Webhooks"],
      // Sent by the relay to your URL: no API key. Verify the webhook-signature header instead.
      security: [],
      request: { headers: SIGNED_HEADERS, body: { required: true, content: { "application/json": { schema } } } },
      responses: {
        200: {
          description:
            "Any 2xx within WEBHOOK_TIMEOUT_MS acknowledges the event. Anything else is retried, unless it is a 410 or carries the header webhook-delivery: abort.",
        },
        410: {
          description: "Gone: the relay stops retrying this event (so does any non-2xx with webhook-delivery: abort).",
        },
      },
    });
  }
}

/** The OpenAPI document of the webhooks alone (what /openapi.json has under `webhooks`, with the schemas they use). */
export function webhookDocument(): Record<string, any> {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  const app = new OpenAPIHono();
  registerWebhookDocs(app);
  return app.getOpenAPI31Document({ openapi: "3.1.0", info: { title: "genrelay webhooks", version: "1.0.0" } });
}

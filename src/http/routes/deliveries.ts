import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { PINGS_PER_MINUTE, TRIGGERS_PER_MINUTE, type DeliveryService } from "../../services/deliveries.js";
import { TEST_EVENT_TYPES } from "../../services/sample-events.js";
import type { ServiceDeps } from "../../services/deps.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { errorResponses, FeedAfterParam, ownBody, publicUrl, TaskIdParam } from "../schemas.js";

const security = [{ bearerAuth: [] }];
const json = <T extends z.ZodType>(schema: T) => ({ "application/json": { schema } });

const AttemptSchema = z
  .object({
    id: z.string(),
    event_id: z.string().openapi({ description: "The event's id: the webhook-id every destination of it got." }),
    destination: z.string().openapi({
      description: "Where this attempt went: \"callback\" (the task's callback_url) or an endpoint's id (ep_…).",
      example: "callback",
    }),
    event_type: z.string(),
    url: z.string(),
    attempted_at: z.string(),
    outcome: z.enum(["succeeded", "failed", "blocked"]),
    status_code: z.number().int().nullable(),
    latency_ms: z.number().int().nullable(),
    error: z.string().nullable(),
    response_body: z.string().nullable(),
  })
  .openapi("DeliveryAttempt");

const PingResultSchema = z
  .object({
    webhook_id: z.string(),
    type: z.enum(TEST_EVENT_TYPES),
    url: z.string(),
    succeeded: z.boolean(),
    status_code: z.number().int().nullable(),
    latency_ms: z.number().int(),
    error: z.string().nullable(),
  })
  .openapi("PingResult");

const FailingHostSchema = z
  .object({
    host: z.string(),
    failing_since: z.string(),
    attempts: z.number().int(),
    pending_events: z.number().int(),
    last_error: z.string().nullable(),
  })
  .openapi("FailingHost");

const EventItemSchema = z
  .object({
    id: z.string(),
    type: z.string(),
    timestamp: z.string(),
    data: z.record(z.string(), z.unknown()),
    delivery: z
      .object({
        status: z.string(),
        attempts: z.number().int(),
        last_status_code: z.number().int().nullable(),
      })
      .openapi({ description: "The delivery to the task's own callback_url (none: it has none)." }),
    endpoints: z
      .array(
        z.object({
          endpoint_id: z.string(),
          status: z
            .string()
            .openapi({ description: "pending, succeeded, failed, or ended (the endpoint was deleted)" }),
          attempts: z.number().int(),
          last_status_code: z.number().int().nullable(),
        }),
      )
      .openapi({ description: "The deliveries of this event to your endpoints, one per endpoint it went to." }),
  })
  .openapi("EventItem");

export function registerDeliveryRoutes(
  app: OpenAPIHono<AppEnv>,
  _deps: ServiceDeps,
  deliveries: DeliveryService,
): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks/{id}/deliveries",
      operationId: "listTaskDeliveries",
      tags: ["Webhooks"],
      summary: "Every delivery attempt of a task's events",
      security,
      request: { params: TaskIdParam },
      responses: {
        200: { description: "Attempts, oldest first", content: json(z.object({ data: z.array(AttemptSchema) })) },
        ...errorResponses(400, 401, 404),
      },
    }),
    async (c) => c.json({ data: await deliveries.listAttempts(c.get("client").id, c.req.valid("param").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/tasks/{id}/redeliver",
      operationId: "redeliverTask",
      tags: ["Webhooks"],
      summary: "Send the task's last event again (same webhook-id)",
      description: `At most ${TRIGGERS_PER_MINUTE} redelivers a minute per client: 429 rate_limit otherwise.`,
      security,
      request: { params: TaskIdParam },
      responses: {
        202: {
          description: "Queued for delivery",
          content: json(
            z.object({ data: z.object({ event_id: z.string(), event_type: z.string(), status: z.string() }) }),
          ),
        },
        ...errorResponses(400, 401, 404, 429),
      },
    }),
    async (c) => c.json({ data: await deliveries.redeliver(c.get("client").id, c.req.valid("param").id) }, 202),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/webhooks/hosts",
      operationId: "listFailingHosts",
      tags: ["Webhooks"],
      summary: "Your callback hosts answering no 2xx now",
      description:
        "Each host (hostname:port) since its first failure after its last 2xx, with failed attempts, pending events and the last error.",
      security,
      responses: {
        200: {
          description: "Failing hosts, longest failing first",
          content: json(z.object({ data: z.array(FailingHostSchema) })),
        },
        ...errorResponses(401),
      },
    }),
    async (c) => c.json({ data: await deliveries.failingHosts(c.get("client").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/webhooks/hosts/{host}/retry",
      operationId: "retryHost",
      tags: ["Webhooks"],
      summary: "Retry now: send your waiting and paused events for one callback host at once",
      description: `The host is hostname:port, URL-encoded (hooks.example.com:443). Its events due later or paused by its circuit breaker are sent at once, the first as the circuit's trial. At most ${TRIGGERS_PER_MINUTE} a minute per client: 429 rate_limit otherwise.`,
      security,
      request: {
        params: z.object({
          host: z
            .string()
            .max(300)
            .openapi({
              param: { name: "host", in: "path", description: "hostname:port, URL-encoded" },
              example: "hooks.example.com:443",
            }),
        }),
      },
      responses: {
        202: {
          description: "How many events were made due",
          content: json(z.object({ data: z.object({ host: z.string(), requeued: z.number().int() }) })),
        },
        ...errorResponses(400, 401, 429),
      },
    }),
    async (c) => c.json({ data: await deliveries.retryHost(c.get("client").id, c.req.valid("param").host) }, 202),
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/webhooks/test",
      operationId: "sendTestWebhook",
      tags: ["Webhooks"],
      summary: "Send a signed test event (a ping, or a sample of any event type) to a URL and report the attempt",
      security,
      request: {
        body: {
          required: true,
          content: json(
            ownBody({
              url: publicUrl("Where the test event goes.").openapi({ example: "https://example.com/hooks" }),
              type: z
                .enum(TEST_EVENT_TYPES, { error: `must be one of ${TEST_EVENT_TYPES.join(", ")}` })
                .optional()
                .openapi({
                  description:
                    "Default ping. A task or notice type sends a realistic sample of that event (data.sample: true), so a low-code tool can learn its structure.",
                }),
              task_type: z.enum(["image", "video"], { error: "must be image or video" }).optional().openapi({
                description:
                  "For task event samples: an image task (default) or a video task, of the catalog's first model of that kind.",
              }),
            }),
          ),
        },
      },
      description: `Signed like every webhook and sent with your default callback headers. Status and latency only, never the receiver's body. At most ${PINGS_PER_MINUTE} a minute per client, and under the same per-host cap and circuit breaker as deliveries: 429 rate_limit otherwise.`,
      responses: {
        200: { description: "The attempt's result", content: json(z.object({ data: PingResultSchema })) },
        ...errorResponses(400, 401, 413, 415, 422, 429),
      },
    }),
    async (c) => {
      const body = c.req.valid("json");
      return c.json(
        { data: await deliveries.testWebhook(c.get("client").id, body.url, body.type, body.task_type) },
        200,
      );
    },
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/webhooks/secret/rotate",
      operationId: "rotateWebhookSecret",
      tags: ["Webhooks"],
      summary: "Rotate your webhook signing secret",
      description:
        "With hmac signing: returns the new whsec_ secret once; the old secret keeps signing beside it (two v1 signatures) for 24 hours. With ed25519: a new key pair; its public_key is returned, and the old key keeps signing beside it (two v1a signatures) for 24 hours.",
      security,
      responses: {
        200: {
          description: "The new secret, or the new public key",
          content: json(
            z.object({
              data: z.union([
                z.object({ webhook_secret: z.string(), previous_secret_expires_at: z.string() }),
                z.object({
                  signature: z.literal("ed25519"),
                  public_key: z.string(),
                  previous_key_expires_at: z.string(),
                }),
              ]),
            }),
          ),
        },
        ...errorResponses(401),
      },
    }),
    async (c) => c.json({ data: await deliveries.rotateSecret(c.get("client").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/events",
      operationId: "listEvents",
      tags: ["Webhooks"],
      summary: "Your webhook events in order (pull feed)",
      description:
        "For receivers that were down, or development without a public URL. Keep next_cursor and pass it as after.",
      security,
      request: {
        query: z.object({
          after: FeedAfterParam,
          limit: z.coerce
            .number()
            .int()
            .min(1)
            .max(100)
            .default(50)
            .openapi({ param: { name: "limit", in: "query" } }),
        }),
      },
      responses: {
        200: {
          description: "Events after the cursor",
          content: json(z.object({ data: z.array(EventItemSchema), next_cursor: z.string() })),
        },
        ...errorResponses(400, 401),
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(await deliveries.listEvents(c.get("client").id, q.after, q.limit), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/deliveries/recover",
      operationId: "recoverDeliveries",
      tags: ["Webhooks"],
      summary: "Re-queue your failed deliveries since a time",
      description: `At most ${TRIGGERS_PER_MINUTE} recovers a minute per client: 429 rate_limit otherwise.`,
      security,
      request: {
        body: {
          required: true,
          content: json(
            ownBody({
              since: z.iso.datetime({ offset: true, error: "must be an ISO-8601 date-time" }).openapi({
                example: "2026-01-01T00:00:00Z",
                description: "Failed deliveries of events since this time are queued again.",
              }),
            }),
          ),
        },
      },
      responses: {
        202: {
          description: "How many were re-queued",
          content: json(z.object({ data: z.object({ requeued: z.number().int() }) })),
        },
        ...errorResponses(400, 401, 413, 415, 422, 429),
      },
    }),
    async (c) =>
      c.json({ data: await deliveries.recover(c.get("client").id, Date.parse(c.req.valid("json").since)) }, 202),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/usage",
      operationId: "getUsage",
      tags: ["Usage"],
      summary: "Your task counts and credits",
      security,
      responses: {
        200: {
          description: "Usage",
          content: json(
            z.object({
              data: z.object({
                tasks: z.record(z.string(), z.number().int()),
                points_charged: z.number(),
                points_refunded: z.number(),
                points_reserved: z
                  .number()
                  .openapi({ description: "Held by your waiting and in-flight tasks until their charge is known" }),
                points_spent: z.number().openapi({
                  description: "Charged minus refunded; with points_reserved it never exceeds credit_limit",
                }),
                credit_limit: z.number().nullable(),
              }),
            }),
          ),
        },
        ...errorResponses(401),
      },
    }),
    async (c) => c.json({ data: await deliveries.usage(c.get("client").id) }, 200),
  );
}

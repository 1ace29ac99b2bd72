import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import {
  createEndpoint,
  deleteEndpoint,
  getEndpoint,
  listEndpoints,
  MAX_DESCRIPTION,
  MAX_ENDPOINTS,
} from "../../services/webhook-endpoints.js";
import { DEFAULT_ENDPOINT_EVENTS, ENDPOINT_EVENT_TYPES } from "../../store/endpoint-fanout.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import {
  apiKeySecurity,
  json,
  CallbackHeadersSchema,
  errorResponses,
  jsonBody,
  ownBody,
  publicUrl,
  TaskIdParam,
} from "../schemas.js";

const PATH = "/openapi/v1/webhooks/endpoints";

const EventType = z.enum(ENDPOINT_EVENT_TYPES, { error: `must be one of ${ENDPOINT_EVENT_TYPES.join(", ")}` });

const common = {
  id: z.string().openapi({ example: "ep_01jabcdefghjkmnpqrstvwxyz0" }),
  events: z.array(EventType),
  description: z.string().nullable(),
  created_at: z.string().openapi({ format: "date-time" }),
};

const EndpointSchema = z
  .discriminatedUnion("type", [
    z
      .object({
        type: z.literal("webhook").optional().openapi({ description: "Absent: an HTTP endpoint." }),
        url: z.string().openapi({ example: "https://n8n.example.com/webhook/4f1c" }),
        ...common,
      })
      .openapi("WebhookEndpointHttp"),
    z
      .object({
        type: z.literal("amqp"),
        url: z
          .string()
          .openapi({ description: "The broker, without credentials.", example: "amqps://mq.example.com:5671/prod" }),
        exchange: z.string(),
        routing_key: z.string().nullable(),
        ...common,
      })
      .openapi("WebhookEndpointAmqp"),
    z
      .object({
        type: z.literal("nats"),
        url: z
          .string()
          .openapi({ description: "The server, without credentials.", example: "tls://nats.example.com:4222" }),
        subject: z.string().nullable(),
        ...common,
      })
      .openapi("WebhookEndpointNats"),
    z
      .object({
        type: z.literal("sqs"),
        url: z.string().openapi({ description: "The queue URL." }),
        queue_url: z.string(),
        region: z.string(),
        access_key_id: z.string(),
        endpoint: z.string().nullable(),
        ...common,
      })
      .openapi("WebhookEndpointSqs"),
  ])
  .openapi("WebhookEndpoint");

const events = z
  .array(EventType)
  .min(1, { error: "at least one event type" })
  .optional()
  .openapi({
    description: `The event types delivered to this endpoint; default ${DEFAULT_ENDPOINT_EVENTS.join(", ")}.`,
  });
const description = z
  .string()
  .max(MAX_DESCRIPTION, { error: `at most ${MAX_DESCRIPTION} characters` })
  .nullable()
  .optional();
const text = (max: number) => z.string().max(max, { error: `at most ${max} characters` });

const EndpointCreate = z
  .discriminatedUnion(
    "type",
    [
      ownBody({
        type: z.literal("webhook").optional().openapi({ description: "`webhook` (the default): an HTTP endpoint." }),
        url: publicUrl("Where the client's events are delivered.")
          .max(2048, { error: "at most 2048 characters" })
          .openapi({ example: "https://n8n.example.com/webhook/4f1c" }),
        events,
        description,
        headers: CallbackHeadersSchema.nullable().optional().openapi({
          description:
            "Sent with every delivery to this endpoint, under the callback_headers rules; stored sealed and never shown again.",
        }),
      }).openapi("WebhookEndpointCreate"),
      ownBody({
        type: z.literal("amqp"),
        url: text(2048).openapi({
          description:
            "The RabbitMQ broker: amqp:// or amqps://user:pass@host:port/vhost (credentials stored sealed, never shown).",
          example: "amqps://relay:secret@mq.example.com:5671/prod",
        }),
        exchange: text(255).openapi({
          description: "The exchange the message is published to (checked at each publish).",
        }),
        routing_key: text(255).nullable().optional().openapi({ description: "Default: the event type." }),
        events,
        description,
      }).openapi("AmqpEndpointCreate"),
      ownBody({
        type: z.literal("nats"),
        url: text(2048).openapi({
          description: "The NATS server: nats:// or tls://host:port (user:pass in the URL stored sealed).",
          example: "tls://nats.example.com:4222",
        }),
        subject: text(255).nullable().optional().openapi({ description: "Default: genrelay.<event type>." }),
        token: text(1024).nullable().optional().openapi({ description: "An auth token (stored sealed)." }),
        credentials: text(8192)
          .nullable()
          .optional()
          .openapi({ description: "A .creds file's text: user JWT and NKey seed (stored sealed)." }),
        events,
        description,
      }).openapi("NatsEndpointCreate"),
      ownBody({
        type: z.literal("sqs"),
        queue_url: text(2048).openapi({ example: "https://sqs.eu-west-1.amazonaws.com/123456789012/genrelay" }),
        region: text(64).openapi({ example: "eu-west-1" }),
        access_key_id: text(128),
        secret_access_key: text(128).openapi({ description: "Stored sealed, never shown." }),
        endpoint: text(2048)
          .nullable()
          .optional()
          .openapi({ description: "An SQS-compatible service instead of AWS's (its origin)." }),
        events,
        description,
      }).openapi("SqsEndpointCreate"),
    ],
    { error: "must be one of webhook, amqp, nats, sqs" },
  )
  .openapi("WebhookEndpointCreateBody");

const EndpointIdParam = TaskIdParam;

/**
 * /openapi/v1/webhooks/endpoints: the client's subscriptions (docs/contract.md, "Endpoints"), which
 * the n8n trigger and the Zapier REST hook create on activation and delete on deactivation.
 */
export function registerWebhookEndpointRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.openapi(
    apiRoute({
      method: "post",
      path: PATH,
      operationId: "createWebhookEndpoint",
      tags: ["Webhooks"],
      summary: "Subscribe a URL or a queue to your tasks' events",
      description: `Every event of your tasks whose type the endpoint subscribes to is delivered to it (and to the task's own callback_url, if any), each destination with its own attempts, retries and breaker, under the same webhook-id, body and signature. url passes the callback_url checks. With type amqp, nats or sqs the endpoint is a queue: each message is the webhook (same body; webhook-id, webhook-timestamp, webhook-signature as headers or attributes), delivered when the broker confirms it (docs/destinations.md); credentials are stored sealed and never shown. At most ${MAX_ENDPOINTS} endpoints per client.`,
      security: apiKeySecurity,
      request: { body: jsonBody(EndpointCreate) },
      responses: {
        201: { description: "The endpoint", content: json(z.object({ data: EndpointSchema })) },
        ...errorResponses(400, 401, 413, 415, 422),
      },
    }),
    async (c) => c.json({ data: await createEndpoint(deps, c.get("client").id, c.req.valid("json")) }, 201),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: PATH,
      operationId: "listWebhookEndpoints",
      tags: ["Webhooks"],
      summary: "Your endpoints, oldest first",
      security: apiKeySecurity,
      responses: {
        200: { description: "The endpoints", content: json(z.object({ data: z.array(EndpointSchema) })) },
        ...errorResponses(401),
      },
    }),
    async (c) => c.json({ data: await listEndpoints(deps, c.get("client").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: `${PATH}/{id}`,
      operationId: "getWebhookEndpoint",
      tags: ["Webhooks"],
      summary: "One of your endpoints",
      security: apiKeySecurity,
      request: { params: EndpointIdParam },
      responses: {
        200: { description: "The endpoint", content: json(z.object({ data: EndpointSchema })) },
        ...errorResponses(400, 401, 404),
      },
    }),
    async (c) => c.json({ data: await getEndpoint(deps, c.get("client").id, c.req.valid("param").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "delete",
      path: `${PATH}/{id}`,
      operationId: "deleteWebhookEndpoint",
      tags: ["Webhooks"],
      summary: "Remove an endpoint; its pending deliveries end",
      security: apiKeySecurity,
      request: { params: EndpointIdParam },
      responses: { 204: { description: "Removed" }, ...errorResponses(400, 401, 404) },
    }),
    async (c) => {
      await deleteEndpoint(deps, c.get("client").id, c.req.valid("param").id);
      return c.body(null, 204);
    },
  );
}

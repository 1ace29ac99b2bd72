import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import {
  createEndpoint,
  DEFAULT_ENDPOINT_EVENTS,
  deleteEndpoint,
  ENDPOINT_EVENT_TYPES,
  getEndpoint,
  listEndpoints,
  MAX_DESCRIPTION,
  MAX_ENDPOINTS,
} from "../../services/webhook-endpoints.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { CallbackHeadersSchema, errorResponses, ownBody, publicUrl, TaskIdParam } from "../schemas.js";

const security = [{ bearerAuth: [] }];
const json = <T extends z.ZodType>(schema: T) => ({ "application/json": { schema } });
const PATH = "/openapi/v1/webhooks/endpoints";

const EventType = z.enum(ENDPOINT_EVENT_TYPES, { error: `must be one of ${ENDPOINT_EVENT_TYPES.join(", ")}` });

const EndpointSchema = z
  .object({
    id: z.string().openapi({ example: "ep_01jabcdefghjkmnpqrstvwxyz0" }),
    url: z.string().openapi({ example: "https://n8n.example.com/webhook/4f1c" }),
    events: z.array(EventType),
    description: z.string().nullable(),
    created_at: z.string().openapi({ format: "date-time" }),
  })
  .openapi("WebhookEndpoint");

const EndpointCreate = ownBody({
  url: publicUrl("Where the client's events are delivered.")
    .max(2048, { error: "at most 2048 characters" })
    .openapi({ example: "https://n8n.example.com/webhook/4f1c" }),
  events: z
    .array(EventType)
    .min(1, { error: "at least one event type" })
    .optional()
    .openapi({
      description: `The event types delivered to this endpoint; default ${DEFAULT_ENDPOINT_EVENTS.join(", ")}.`,
    }),
  description: z
    .string()
    .max(MAX_DESCRIPTION, { error: `at most ${MAX_DESCRIPTION} characters` })
    .nullable()
    .optional(),
  headers: CallbackHeadersSchema.nullable().optional().openapi({
    description:
      "Sent with every delivery to this endpoint, under the callback_headers rules; stored sealed and never shown again.",
  }),
}).openapi("WebhookEndpointCreate");

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
      summary: "Subscribe a URL to your tasks' events",
      description: `Every event of your tasks whose type the endpoint subscribes to is delivered to it (and to the task's own callback_url, if any), each destination with its own attempts, retries and breaker, under the same webhook-id, body and signature. url passes the callback_url checks. At most ${MAX_ENDPOINTS} endpoints per client.`,
      security,
      request: { body: { required: true, content: json(EndpointCreate) } },
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
      security,
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
      security,
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
      security,
      request: { params: EndpointIdParam },
      responses: { 204: { description: "Removed" }, ...errorResponses(400, 401, 404) },
    }),
    async (c) => {
      await deleteEndpoint(deps, c.get("client").id, c.req.valid("param").id);
      return c.body(null, 204);
    },
  );
}

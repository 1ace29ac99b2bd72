import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { TRIGGERS_PER_MINUTE, type DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json, TaskIdParam } from "../schemas.js";

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

/** A task's deliveries: every attempt of its events, and its last event sent again (same webhook-id). */
export function registerTaskDeliveryRoutes(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "listAttempts" | "redeliver">,
): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks/{id}/deliveries",
      operationId: "listTaskDeliveries",
      tags: ["Webhooks"],
      summary: "Every delivery attempt of a task's events",
      security: apiKeySecurity,
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
      security: apiKeySecurity,
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
}

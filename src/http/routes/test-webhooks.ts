import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { PINGS_PER_MINUTE, type DeliveryService } from "../../services/deliveries.js";
import { TEST_EVENT_TYPES } from "../../services/sample-events.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json, ownBody, publicUrl, jsonBody } from "../schemas.js";

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

/** Test webhooks: a signed ping or sample event sent to a URL, answered with the attempt's result. */
export function registerTestWebhookRoute(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "testWebhook">,
): void {
  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/webhooks/test",
      operationId: "sendTestWebhook",
      tags: ["Webhooks"],
      summary: "Send a signed test event (a ping, or a sample of any event type) to a URL and report the attempt",
      security: apiKeySecurity,
      request: {
        body: jsonBody(
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
}

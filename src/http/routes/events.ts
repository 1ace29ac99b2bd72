import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, FeedAfterParam, json } from "../schemas.js";

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

/** The pull feed: the client's webhook events in order, with each destination's delivery state. */
export function registerEventFeedRoute(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "listEvents">,
): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/events",
      operationId: "listEvents",
      tags: ["Webhooks"],
      summary: "Your webhook events in order (pull feed)",
      description:
        "For receivers that were down, or development without a public URL. Keep next_cursor and pass it as after.",
      security: apiKeySecurity,
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
}

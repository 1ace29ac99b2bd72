import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json } from "../schemas.js";

/** The client's task counts and credits. */
export function registerUsageRoute(app: OpenAPIHono<AppEnv>, deliveries: Pick<DeliveryService, "usage">): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/usage",
      operationId: "getUsage",
      tags: ["Usage"],
      summary: "Your task counts and credits",
      security: apiKeySecurity,
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

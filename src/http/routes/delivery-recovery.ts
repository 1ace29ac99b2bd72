import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { TRIGGERS_PER_MINUTE, type DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json, ownBody, jsonBody } from "../schemas.js";

/** Failed deliveries since a time, queued again (after a receiver's outage). */
export function registerDeliveryRecoveryRoute(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "recover">,
): void {
  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/deliveries/recover",
      operationId: "recoverDeliveries",
      tags: ["Webhooks"],
      summary: "Re-queue your failed deliveries since a time",
      description: `At most ${TRIGGERS_PER_MINUTE} recovers a minute per client: 429 rate_limit otherwise.`,
      security: apiKeySecurity,
      request: {
        body: jsonBody(
          ownBody({
            since: z.iso.datetime({ offset: true, error: "must be an ISO-8601 date-time" }).openapi({
              example: "2026-01-01T00:00:00Z",
              description: "Failed deliveries of events since this time are queued again.",
            }),
          }),
        ),
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
}

import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { TRIGGERS_PER_MINUTE, type DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json } from "../schemas.js";

const FailingHostSchema = z
  .object({
    host: z.string(),
    failing_since: z.string(),
    attempts: z.number().int(),
    pending_events: z.number().int(),
    last_error: z.string().nullable(),
  })
  .openapi("FailingHost");

/** The client's callback hosts answering no 2xx now (its delivery keys' health), and retrying one at once. */
export function registerFailingHostRoutes(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "failingHosts" | "retryHost">,
): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/webhooks/hosts",
      operationId: "listFailingHosts",
      tags: ["Webhooks"],
      summary: "Your callback hosts answering no 2xx now",
      description:
        "Each host (hostname:port) since its first failure after its last 2xx, with failed attempts, pending events and the last error.",
      security: apiKeySecurity,
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
      security: apiKeySecurity,
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
}

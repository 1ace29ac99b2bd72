import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { DeliveryService } from "../../services/deliveries.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, json } from "../schemas.js";

/** The client's webhook signing secret (or Ed25519 key pair), rotated with 24 hours of overlap. */
export function registerWebhookSecretRoute(
  app: OpenAPIHono<AppEnv>,
  deliveries: Pick<DeliveryService, "rotateSecret">,
): void {
  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/webhooks/secret/rotate",
      operationId: "rotateWebhookSecret",
      tags: ["Webhooks"],
      summary: "Rotate your webhook signing secret",
      description:
        "With hmac signing: returns the new whsec_ secret once; the old secret keeps signing beside it (two v1 signatures) for 24 hours. With ed25519: a new key pair; its public_key is returned, and the old key keeps signing beside it (two v1a signatures) for 24 hours.",
      security: apiKeySecurity,
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
}

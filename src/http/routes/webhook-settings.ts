import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { ServiceDeps } from "../../services/deps.js";
import { getWebhookSettings, updateWebhookSettings } from "../../services/webhook-settings.js";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import {
  apiKeySecurity,
  json,
  CallbackHeadersSchema,
  errorResponses,
  ownBody,
  publicUrl,
  jsonBody,
} from "../schemas.js";

const SettingsSchema = z
  .object({
    notification_url: z.string().nullable().openapi({
      description: "Where endpoint.failing, endpoint.recovered and delivery.exhausted notices go; null: none.",
    }),
    callback_headers: z.array(z.string()).nullable().openapi({
      description: "The names of the default callback headers (values are never shown again); null: none.",
    }),
    signature: z.enum(["hmac", "ed25519"]),
    public_key: z.string().optional().openapi({
      description: "With ed25519: whpk_<base64 of the raw 32-byte Ed25519 public key>; verify v1a signatures with it.",
    }),
    previous_public_key: z.string().optional().openapi({
      description: "During a key rotation's 24-hour overlap: the previous key, still signing beside the new one.",
    }),
    previous_public_key_expires_at: z.string().optional(),
    previous_signature_expires_at: z.string().optional().openapi({
      description:
        "For 24 hours after signature changes scheme: until when the previous scheme's signature (v1 or v1a) is still sent beside the new one's.",
    }),
  })
  .openapi("WebhookSettings");

const SettingsUpdate = ownBody(
  {
    notification_url: publicUrl(
      "Where endpoint.failing, endpoint.recovered and delivery.exhausted notices go; null removes it.",
    )
      .max(2048, { error: "at most 2048 characters" })
      .nullable()
      .optional()
      .openapi({ example: "https://example.com/hooks/genrelay-ops" }),
    callback_headers: CallbackHeadersSchema.nullable().optional().openapi({
      description:
        "Replaces every default header; null removes them. A task's own callback_headers override same-named defaults.",
    }),
    signature: z.enum(["hmac", "ed25519"], { error: "must be hmac or ed25519" }).optional().openapi({
      description:
        "hmac: v1 signatures with your whsec_ secret. ed25519: v1a signatures made with a key pair the relay holds; GET shows its public_key.",
    }),
  },
  "setting",
).openapi("WebhookSettingsUpdate");

/** GET/PUT /openapi/v1/webhooks/settings: the client's webhook defaults (docs/contract.md, "Receivers"). */
export function registerWebhookSettingsRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/webhooks/settings",
      operationId: "getWebhookSettings",
      tags: ["Webhooks"],
      summary: "Your webhook defaults: notification URL, callback header names, signature scheme",
      security: apiKeySecurity,
      responses: {
        200: { description: "The settings", content: json(z.object({ data: SettingsSchema })) },
        ...errorResponses(401),
      },
    }),
    async (c) => c.json({ data: await getWebhookSettings(deps, c.get("client").id) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "put",
      path: "/openapi/v1/webhooks/settings",
      operationId: "updateWebhookSettings",
      tags: ["Webhooks"],
      summary: "Change your webhook defaults (fields left out are unchanged)",
      description:
        "notification_url passes the same checks as callback_url. callback_headers: at most 8, names HTTP tokens (never host, connection, content-*, transfer-encoding, te, upgrade, user-agent, webhook-*), values at most 1024 visible ASCII characters; stored sealed and never shown again. Choosing ed25519 the first time makes the key pair.",
      security: apiKeySecurity,
      request: { body: jsonBody(SettingsUpdate) },
      responses: {
        200: { description: "The settings now", content: json(z.object({ data: SettingsSchema })) },
        ...errorResponses(400, 401, 413, 415, 422),
      },
    }),
    async (c) => c.json({ data: await updateWebhookSettings(deps, c.get("client").id, c.req.valid("json")) }, 200),
  );
}

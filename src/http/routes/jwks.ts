import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { createHash } from "node:crypto";
import type { ServiceDeps } from "../../services/deps.js";
import { ClientRows } from "../../services/client-rows.js";
import { getClientJwks, JwksCache } from "../../services/jwks.js";
import type { AppEnv } from "../context.js";
import { apiRoute, headerRefs } from "../schema-rules.js";
import { errorResponses } from "../schemas.js";

/**
 * The one route under /openapi/v1 that takes no API key (docs/contract.md, "Published keys"):
 * receivers fetch a client's Ed25519 public keys from here. Exempted from bearer auth by this exact
 * shape (one path segment after jwks/), so no other path can slip through it. Every method is:
 * the route serves only GET and HEAD, so any other gets the app's 405 with Allow rather than a 401
 * that would send the caller looking for a key it does not need.
 */
const PUBLIC_KEYS_PATH = /^\/openapi\/v1\/webhooks\/jwks\/[^/]+$/;

export function isPublicKeysRequest(c: Context): boolean {
  return PUBLIC_KEYS_PATH.test(c.req.path);
}

/** Keys change only on a rotation, and the previous one keeps signing for 24 hours: five minutes of caching is safe. */
const CACHE_CONTROL = "public, max-age=300";

const JwkSchema = z
  .object({
    kty: z.literal("OKP"),
    crv: z.literal("Ed25519"),
    kid: z.string().openapi({ description: "RFC 7638 thumbprint of the key (base64url SHA-256): stable per key." }),
    x: z.string().openapi({ description: "base64url of the raw 32-byte Ed25519 public key." }),
    use: z.literal("sig"),
    alg: z.literal("EdDSA"),
  })
  .openapi("Jwk");

const JwksSchema = z
  .object({
    keys: z.array(JwkSchema).openapi({
      description: "The current key first; during a rotation's 24-hour overlap also the previous one.",
    }),
  })
  .openapi("Jwks");

const notFound = errorResponses(404)[404]!;

export function registerJwksRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  const cache = new JwksCache();
  // The client row, kept until the store reports it changed (a rotation, a switch, a revocation).
  const rows = new ClientRows(deps);
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/webhooks/jwks/{client_id}",
      operationId: "getWebhookJwks",
      tags: ["Webhooks"],
      summary: "A client's Ed25519 webhook public keys, as a JWKS (no API key)",
      description:
        "RFC 7517 JWK Set of RFC 8037 OKP keys that verify the client's v1a signatures: its current key and, during a rotation's 24-hour overlap, the previous one. Public and cacheable; an unknown, revoked or hmac client is the same 404, whose message says what each case means and how a client switches to ed25519. Methods other than GET and HEAD: 405 with Allow.",
      security: [],
      request: {
        params: z.object({
          client_id: z
            .string()
            .openapi({ param: { name: "client_id", in: "path" }, example: "cli_01jf3y8k2m9q7r5t3v1w0x6z4a" }),
        }),
      },
      responses: {
        200: {
          description: "The client's public keys",
          headers: headerRefs("Cache-Control", "ETag"),
          content: { "application/json": { schema: JwksSchema } },
        },
        304: { description: "Not modified: If-None-Match named this ETag", headers: headerRefs("ETag") },
        404: {
          ...notFound,
          description:
            'No such client, revoked, or signing with hmac (not_found): the message names the three cases and the fix for the last (PUT /openapi/v1/webhooks/settings {"signature":"ed25519"})',
        },
        ...errorResponses(),
      },
    }),
    async (c) => {
      const jwks = await getClientJwks(deps, c.req.valid("param").client_id, cache, rows);
      const body = JSON.stringify(jwks);
      const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`;
      const headers = { "Cache-Control": CACHE_CONTROL, ETag: etag };
      const asked = (c.req.header("if-none-match") ?? "").split(",").map((t) => t.trim().replace(/^W\//, ""));
      if (asked.includes(etag) || asked.includes("*")) return c.body(null, 304, headers);
      return c.json(jwks, 200, headers);
    },
  );
}

import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { CatalogCache } from "../../services/catalog.js";
import type { AppEnv } from "../context.js";
import { apiRoute, headerRefs } from "../schema-rules.js";
import { errorResponses } from "../schemas.js";

export function registerModelRoutes(app: OpenAPIHono<AppEnv>, catalog: CatalogCache): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/models",
      operationId: "listModels",
      tags: ["Models"],
      summary: "The upstream model catalog (cached)",
      description:
        "Verbatim from the upstream, refreshed in the background; served stale when the upstream fails, with an Age header.",
      security: [{ bearerAuth: [] }],
      responses: {
        200: {
          description: "The catalog",
          headers: headerRefs("Age"),
          content: {
            "application/json": {
              schema: z.record(z.string(), z.unknown()).openapi({
                description:
                  "The upstream's catalog body, verbatim: its models and their capabilities, in the upstream's own shape.",
              }),
            },
          },
        },
        ...errorResponses(401, 503),
      },
    }),
    async (c) => {
      const { body, ageSeconds } = await catalog.get(c.get("client").upstreamAccount);
      c.header("Age", String(ageSeconds));
      c.header("Cache-Control", "private, max-age=60");
      return c.json(body as object, 200);
    },
  );
}

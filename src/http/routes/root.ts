import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";

/** Where a newcomer goes from the relay's root: what a bare 404 never said. */
const POINTERS = {
  name: "genrelay",
  description: "Webhooks for an asynchronous image and video generation API.",
  docs: "/docs",
  dashboard: "/dashboard",
  openapi: "/openapi.json",
} as const;

const PointersSchema = z
  .object({
    name: z.literal("genrelay"),
    description: z.string(),
    docs: z.literal("/docs").openapi({ description: "The API reference, rendered from /openapi.json" }),
    dashboard: z.literal("/dashboard").openapi({ description: "The web dashboard (sign in with an API key)" }),
    openapi: z.literal("/openapi.json").openapi({ description: "The OpenAPI 3.1 document" }),
  })
  .openapi("RootPointers");

const HTML = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>genrelay</title></head><body>
<h1>genrelay</h1><p>${POINTERS.description}</p>
<ul><li><a href="/docs">API reference</a> (/docs)</li><li><a href="/dashboard">Dashboard</a> (/dashboard)</li><li><a href="/openapi.json">OpenAPI document</a> (/openapi.json)</li></ul>
</body></html>`;

/** GET /: a small pointer to the docs, the dashboard and the OpenAPI document, as JSON or, for a browser, HTML. */
export function registerRootRoute(app: OpenAPIHono<AppEnv>): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/",
      operationId: "getRoot",
      security: [],
      tags: ["Operations"],
      summary: "Where to go from here: the docs, the dashboard and this document (no API key)",
      responses: {
        200: {
          description: "Pointers, as JSON (or HTML when the request prefers text/html, as a browser does)",
          content: { "application/json": { schema: PointersSchema }, "text/html": { schema: z.string() } },
        },
      },
    }),
    (c) => {
      if (/\btext\/html\b/.test(c.req.header("accept") ?? "")) return c.html(HTML, 200);
      return c.json(POINTERS, 200);
    },
  );
}

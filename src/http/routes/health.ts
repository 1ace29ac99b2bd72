import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";

export interface Readiness {
  /** Returns the problems that make the relay unready; empty when ready. */
  check(): Promise<string[]>;
}

const HealthSchema = z.object({ status: z.enum(["ok", "unavailable"]), problems: z.array(z.string()).optional() });

export function registerHealthRoutes(app: OpenAPIHono<AppEnv>, readiness: Readiness): void {
  app.openapi(
    apiRoute({
      method: "get",
      path: "/healthz",
      operationId: "checkLiveness",
      security: [],
      tags: ["Operations"],
      summary: "Liveness: the process is up",
      responses: { 200: { description: "Up", content: { "application/json": { schema: HealthSchema } } } },
    }),
    (c) => c.json({ status: "ok" as const }, 200),
  );
  app.openapi(
    apiRoute({
      method: "get",
      path: "/readyz",
      operationId: "checkReadiness",
      security: [],
      tags: ["Operations"],
      summary: "Readiness: the database is writable and every worker loop is running",
      responses: {
        200: { description: "Ready", content: { "application/json": { schema: HealthSchema } } },
        503: { description: "Not ready, with the reasons", content: { "application/json": { schema: HealthSchema } } },
      },
    }),
    async (c) => {
      const problems = await readiness.check();
      if (problems.length > 0) return c.json({ status: "unavailable" as const, problems }, 503);
      return c.json({ status: "ok" as const }, 200);
    },
  );
}

import { OpenAPIHono } from "@hono/zod-openapi";
import { requestId } from "hono/request-id";
import type { CatalogCache } from "../services/catalog.js";
import type { ServiceDeps } from "../services/deps.js";
import type { DeliveryService } from "../services/deliveries.js";
import type { Metrics } from "../metrics.js";
import type { AppEnv } from "./context.js";
import { createDashboard, type HostHealth } from "./dashboard/index.js";
import { registerDocs } from "./docs.js";
import { errorResponse, onError, validationFailure } from "./errors.js";
import { bearerAuth, jsonBody, newRequestId, requestLog, tokenAuth } from "./middleware.js";
import { registerDeliveryRoutes } from "./routes/deliveries.js";
import { registerGenerationRoutes } from "./routes/generations.js";
import { registerHealthRoutes, type Readiness } from "./routes/health.js";
import { registerModelRoutes } from "./routes/meta.js";
import { registerTaskRoutes } from "./routes/tasks.js";
import { registerStorageRoutes } from "./routes/storage.js";
import { registerWebhookSettingsRoutes } from "./routes/webhook-settings.js";
import { registerWebhookDocs } from "./webhook-schemas.js";
import type { ZodError } from "zod";

export interface AppDeps extends ServiceDeps {
  catalog: CatalogCache;
  readiness: Readiness;
  deliveries: DeliveryService;
  metrics?: Metrics;
  hostHealth?: HostHealth;
}

/** Builds the HTTP app; opening the database, listening and workers belong to main.ts. */
export function createApp(deps: AppDeps): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result, c) => {
      if (!result.success) return validationFailure(c, result.target, result.error as unknown as ZodError);
      return undefined;
    },
  });

  // Always our own id (limitLength 0 ignores a caller's X-Request-Id): it is what support looks up,
  // so a caller must not be able to choose it, reuse another request's, or inject text into logs.
  app.use(requestId({ generator: newRequestId, limitLength: 0 }));
  app.use(requestLog(deps.logger, deps.metrics));
  // Sandbox mode (no UPSTREAM_BASE_URL): every answer says its results are simulated (section 14).
  if (!deps.config.upstreamBaseUrl) {
    app.use(async (c, next) => {
      await next();
      c.res.headers.set("Genrelay-Sandbox", "true");
    });
  }
  app.onError(onError(deps.logger, deps.storage));
  app.notFound((c) => errorResponse(c, "not_found", `No route ${c.req.method} ${c.req.path}.`));

  app.use("/openapi/v1/*", bearerAuth(deps));
  app.on(
    "POST",
    ["/openapi/v1/images/generations", "/openapi/v1/videos/generations", "/openapi/v1/webhooks/test", "/openapi/v1/deliveries/recover"],
    ...jsonBody(),
  );
  app.on("PUT", ["/openapi/v1/webhooks/settings"], ...jsonBody());

  registerGenerationRoutes(app, deps);
  registerTaskRoutes(app, deps);
  registerStorageRoutes(app, deps);
  registerDeliveryRoutes(app, deps, deps.deliveries);
  registerWebhookSettingsRoutes(app, deps);
  registerModelRoutes(app, deps.catalog);
  registerHealthRoutes(app, deps.readiness);

  if (deps.metrics) {
    const metrics = deps.metrics;
    if (deps.config.metricsToken) app.use("/metrics", tokenAuth(deps.config.metricsToken, "METRICS_TOKEN"));
    app.get("/metrics", async (c) => {
      const { contentType, body } = await metrics.exposition();
      return c.body(body, 200, { "Content-Type": contentType });
    });
  }

  app.openAPIRegistry.registerComponent("securitySchemes", "bearerAuth", {
    type: "http",
    scheme: "bearer",
    description: "A relay API key (grk_…) issued by `npm run cli -- clients create`.",
  });
  registerWebhookDocs(app);
  app.doc31("/openapi.json", {
    openapi: "3.1.0",
    info: {
      title: "genrelay",
      version: "1.0.0",
      description:
        "Webhooks for an asynchronous image and video generation API. Mirrors the upstream's /openapi/v1 paths, adds callback_url, and sends Standard Webhooks-signed callbacks.",
    },
  });
  registerDocs(app);
  app.route("/dashboard", createDashboard(deps));
  return app;
}

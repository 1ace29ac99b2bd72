import { OpenAPIHono, z } from "@hono/zod-openapi";
import type { CatalogCache } from "../services/catalog.js";
import type { ApiKeyCache } from "../services/clients.js";
import type { ServiceDeps } from "../services/deps.js";
import type { DeliveryService } from "../services/deliveries.js";
import type { Metrics } from "../metrics.js";
import type { AppEnv } from "./context.js";
import { createDashboard } from "./dashboard/index.js";
import type { HostHealth } from "./dashboard/views-webhooks.js";
import { registerDocs } from "./docs.js";
import { onError, validationFailure } from "./errors.js";
import { bearerAuth, boundedBodies, type Gate, gated, requestLog, tokenAuth, traceRequests } from "./middleware.js";
import {
  AddressLimiter,
  PUBLIC_LIMIT_EXEMPT,
  PUBLIC_REQUESTS_PER_WINDOW,
  PUBLIC_WINDOW_MS,
  publicRateLimit,
} from "./public-limit.js";
import { telemetry } from "../telemetry/index.js";
import { registerDeliveryRecoveryRoute } from "./routes/delivery-recovery.js";
import { registerEventFeedRoute } from "./routes/events.js";
import { registerFailingHostRoutes } from "./routes/failing-hosts.js";
import { registerTaskDeliveryRoutes } from "./routes/task-deliveries.js";
import { registerTestWebhookRoute } from "./routes/test-webhooks.js";
import { registerUsageRoute } from "./routes/usage.js";
import { registerWebhookSecretRoute } from "./routes/webhook-secret.js";
import { registerGenerationRoutes } from "./routes/generations.js";
import { isPublicKeysRequest, registerJwksRoutes } from "./routes/jwks.js";
import { registerHealthRoutes, type Readiness } from "./routes/health.js";
import { registerRootRoute } from "./routes/root.js";
import { registerModelRoutes } from "./routes/meta.js";
import { registerTaskRoutes } from "./routes/tasks.js";
import { registerStorageRoutes } from "./routes/storage.js";
import { registerFileRoutes } from "./routes/files.js";
import { registerWebhookSettingsRoutes } from "./routes/webhook-settings.js";
import { registerWebhookEndpointRoutes } from "./routes/webhook-endpoints.js";
import { isStreamTokenRequest, registerStreamRoutes, streamCors } from "./routes/streams.js";
import { registerWebhookDocs } from "./webhook-schemas.js";
import { notFoundHandler } from "./not-found.js";
import { apiRoute, headerRefs, RESPONSE_HEADERS } from "./schema-rules.js";
import { developmentDocument, errorResponses } from "./schemas.js";
import type { ZodError } from "zod";

export interface AppDeps extends ServiceDeps {
  catalog: CatalogCache;
  readiness: Readiness;
  deliveries: DeliveryService;
  metrics?: Metrics;
  hostHealth?: HostHealth;
  /** The process's API key cache, shared with the direct creation path (a new one when not given). */
  apiKeys?: ApiKeyCache;
}

/**
 * The only paths whose bodies are not bounded as the API's JSON (middleware.ts, boundedBodies):
 * the dashboard's forms, which it limits to 64 KiB itself.
 */
const OWN_BODY_LIMITS = ["/dashboard/"];

/** The paths hono's "/openapi/v1/*" matches: /openapi/v1 itself and everything under it. */
const isApiPath = (path: string) => path === "/openapi/v1" || path.startsWith("/openapi/v1/");

/** Builds the HTTP app; opening the database, listening and workers belong to main.ts. */
export function createApp(deps: AppDeps): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result, c) => {
      if (!result.success) return validationFailure(c, result.target, result.error as unknown as ZodError);
      return undefined;
    },
  });

  // Tracing on: every request is a SERVER span, the others' work inside it (tracing off: not installed).
  const tracing = telemetry();
  if (tracing.on) app.use(traceRequests(tracing));
  app.use(requestLog(deps.logger, deps.metrics));
  // Sandbox mode (no UPSTREAM_BASE_URL): every answer says its results are simulated (docs/contract.md, "Intake").
  if (!deps.config.upstreamBaseUrl) {
    app.use(async (c, next) => {
      await next();
      c.res.headers.set("Genrelay-Sandbox", "true");
    });
  }
  app.onError(onError(deps.logger, deps.database));
  app.notFound(notFoundHandler(app));

  // Every /openapi/v1 route takes an API key, but one: a client's published keys, which receivers
  // fetch without one (routes/jwks.ts says exactly which requests those are).
  // A browser's task stream carries a stream token instead (routes/streams.ts checks it); CORS
  // answers its preflight before any key is asked for.
  streamCors(app, deps.config);
  // Whatever was not authenticated by then is public, and limited per address (http/public-limit.ts);
  // then the body's bounds. One layer for the three (middleware.ts, gated).
  const auth = bearerAuth(deps);
  const apiKey: Gate = (c) =>
    isApiPath(c.req.path) && !isPublicKeysRequest(c) && !isStreamTokenRequest(c) ? auth(c) : undefined;
  app.use(gated([apiKey, publicRateLimit(new AddressLimiter(deps.clock))], boundedBodies(OWN_BODY_LIMITS)));

  registerGenerationRoutes(app, deps);
  registerTaskRoutes(app, deps);
  registerStorageRoutes(app, deps);
  registerFileRoutes(app, deps);
  // In this order, which is the published document's (paths and schemas appear as registered).
  registerTaskDeliveryRoutes(app, deps.deliveries);
  registerFailingHostRoutes(app, deps.deliveries);
  registerTestWebhookRoute(app, deps.deliveries);
  registerWebhookSecretRoute(app, deps.deliveries);
  registerEventFeedRoute(app, deps.deliveries);
  registerDeliveryRecoveryRoute(app, deps.deliveries);
  registerUsageRoute(app, deps.deliveries);
  registerStreamRoutes(app, deps, deps.deliveries);
  registerWebhookSettingsRoutes(app, deps);
  registerWebhookEndpointRoutes(app, deps);
  registerJwksRoutes(app, deps);
  registerModelRoutes(app, deps.catalog);
  registerHealthRoutes(app, deps.readiness);
  registerRootRoute(app);

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
  for (const [name, header] of Object.entries(RESPONSE_HEADERS))
    app.openAPIRegistry.registerComponent("headers", name, header);
  registerWebhookDocs(app);
  documentBodyBounds(app);
  registerOpenApiDocument(app, deps);
  // After the document's own route, which is public too (the document is built on the first request).
  documentPublicLimit(app);
  registerDocs(app);
  app.route("/dashboard", createDashboard(deps));
  return app;
}

/**
 * Every body-carrying operation documents what boundedBodies answers for any of them (malformed or
 * too deeply nested JSON, too large, not JSON), so a route added tomorrow documents it too.
 */
function documentBodyBounds(app: OpenAPIHono<AppEnv>): void {
  const bounds = errorResponses(400, 413, 415);
  for (const definition of app.openAPIRegistry.definitions) {
    if (definition.type !== "route" || !["post", "put", "patch"].includes(definition.route.method)) continue;
    const responses = definition.route.responses as Record<string, unknown>;
    for (const [status, response] of Object.entries(bounds)) {
      responses[status] ??= { ...response, headers: headerRefs("X-Request-Id") };
    }
  }
}

/**
 * Every operation documented without security answers publicRateLimit's 429 (http/public-limit.ts)
 * unless it is exempt by name, so a public route added tomorrow documents it too.
 */
function documentPublicLimit(app: OpenAPIHono<AppEnv>): void {
  const limited = errorResponses(429)[429]!;
  for (const definition of app.openAPIRegistry.definitions) {
    if (definition.type !== "route" || definition.route.security?.length !== 0) continue;
    if ((PUBLIC_LIMIT_EXEMPT as readonly string[]).includes(definition.route.path)) continue;
    const responses = definition.route.responses as Record<string, unknown>;
    const head = definition.route.method === "head";
    responses["429"] ??= {
      // HEAD: the same answer without its body.
      ...(head ? {} : { content: limited.content }),
      description: `Too many requests without an API key from this address (rate_limit): at most ${PUBLIC_REQUESTS_PER_WINDOW} every ${PUBLIC_WINDOW_MS / 1000} s; see Retry-After`,
      headers: headerRefs("Retry-After", "X-Request-Id"),
    };
  }
}

const TAGS = [
  {
    name: "Generations",
    description: "Create image and video tasks; the relay submits them upstream and calls you back.",
  },
  { name: "Tasks", description: "Read, list and cancel your tasks." },
  {
    name: "Webhooks",
    description: "Deliveries, test events, signing secrets, settings, and the messages the relay sends you.",
  },
  { name: "Storage", description: "Your bucket, which succeeded tasks' output files are copied into." },
  { name: "Models", description: "The upstream's model catalog, cached." },
  { name: "Usage", description: "Your task counts and credits." },
  { name: "Operations", description: "Probes and this document, without an API key." },
];

/**
 * GET /openapi.json, documented itself. Built on the first request, when every route is registered,
 * and kept: the routes do not change while the app runs. The server is PUBLIC_BASE_URL when set,
 * else "/" (wherever this document was fetched from), never the caller's Host header.
 */
function registerOpenApiDocument(app: OpenAPIHono<AppEnv>, deps: AppDeps): void {
  let document: ReturnType<typeof app.getOpenAPI31Document> | null = null;
  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi.json",
      operationId: "getOpenApiDocument",
      security: [],
      tags: ["Operations"],
      summary: "This document: the OpenAPI 3.1 description of the relay's API and webhooks",
      responses: {
        200: {
          description: "The document",
          content: { "application/json": { schema: z.record(z.string(), z.unknown()) } },
        },
      },
    }),
    (c) => {
      if (!document) {
        const built = app.getOpenAPI31Document({
          openapi: "3.1.0",
          info: {
            title: "genrelay",
            version: "1.0.0",
            license: { name: "MIT", url: "https://opensource.org/license/mit" },
            description:
              "Webhooks for an asynchronous image and video generation API. Mirrors the upstream's /openapi/v1 paths, adds callback_url, and sends Standard Webhooks-signed callbacks.",
          },
          servers: [
            {
              url: deps.config.publicBaseUrl ?? "/",
              description: deps.config.publicBaseUrl ? "This relay (PUBLIC_BASE_URL)" : "This relay",
            },
          ],
          tags: TAGS,
        });
        // Relaxed once, when built: the development form is derived from the strict one (its
        // description grows by a sentence), so the cached document must not pass through it again.
        document = deps.config.webhookAllowPrivateNetworks ? developmentDocument(built) : built;
      }
      return c.json(document, 200);
    },
  );
}

/**
 * In-memory implementation of the upstream API (docs/upstream.md). genrelay runs
 * it in-process in sandbox mode; tests drive it with `app.request(...)` and a
 * FakeClock; startSimulator (server.ts) puts it on a real socket.
 */
import { Hono } from "hono";
import { newId } from "../ids.js";
import { mountAdminRoutes } from "./admin-routes.js";
import { mountApiRoutes } from "./api-routes.js";
import type { SimEnv } from "./hono-env.js";
import { errorBody, SimError } from "./errors.js";
import type { SimulatorOptions } from "./options.js";
import { SimulatorState } from "./state.js";

export function createSimulator(options: SimulatorOptions = {}): { app: Hono; state: SimulatorState } {
  const state = new SimulatorState(options);
  const app = new Hono<SimEnv>();

  app.use("*", async (c, next) => {
    const requestId = newId("req", state.clock.now());
    c.set("requestId", requestId);
    await next();
    c.header("X-Request-Id", requestId);
  });

  app.onError((err, c) => {
    const known = err instanceof SimError;
    // Reaching here with anything else is a simulator bug; say so instead of hiding it.
    if (!known) console.error("genrelay simulator: unexpected error", err);
    const simErr = known ? err : new SimError(500, "internal_error", "Internal simulator error");
    const requestId = c.get("requestId") ?? newId("req", state.clock.now());
    for (const [name, value] of Object.entries(simErr.headers)) c.header(name, value);
    c.header("X-Request-Id", requestId);
    return c.json(errorBody(simErr, requestId), simErr.status);
  });

  app.notFound((c) => {
    const requestId = c.get("requestId") ?? newId("req", state.clock.now());
    c.header("X-Request-Id", requestId);
    const err = new SimError(404, "not_found", `No route for ${c.req.method} ${c.req.path}`);
    return c.json(errorBody(err, requestId), 404);
  });

  mountApiRoutes(app, state);
  mountAdminRoutes(app, state);
  // The Variables type only matters inside the routes; callers get a plain Hono.
  return { app: app as unknown as Hono, state };
}

import type { Context, Hono } from "hono";
import { errorResponse } from "./errors.js";

const METHOD_ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/** A hono route path (`/openapi/v1/tasks/:id`, `/docs/*`) as a regular expression over request paths. */
export function routePattern(path: string): RegExp {
  const source = path
    .split("/")
    .map((segment) => {
      if (segment === "*") return ".*";
      const param = /^:\w+(?:\{(.+)\})?\??$/.exec(segment);
      if (param) return param[1] ? `(?:${param[1]})` : "[^/]+";
      return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    })
    .join("/");
  return new RegExp(`^${source}$`);
}

/**
 * The app's answer when no handler took a request: `405 method_not_allowed` with `Allow` when the
 * path is one the app serves with other methods, `404 not_found` otherwise (docs/contract.md,
 * "Errors"). The routes are read when first needed, once the app is complete.
 */
export function notFoundHandler(app: Pick<Hono, "routes">) {
  let table: { pattern: RegExp; method: string }[] = [];
  let seen = -1;
  return (c: Context): Response => {
    if (app.routes.length !== seen) {
      // Middleware (method ALL, or a path with a wildcard under app.use) serves no path of its own.
      table = app.routes
        .filter((r) => r.method !== "ALL")
        .map((r) => ({ pattern: routePattern(r.path), method: r.method.toUpperCase() }));
      seen = app.routes.length;
    }
    const path = c.req.path;
    const allowed = new Set(table.filter((r) => r.pattern.test(path)).map((r) => r.method));
    if (allowed.has("GET")) allowed.add("HEAD");
    // A handler that found nothing (an unknown file under /docs/assets/) is a 404 too.
    if (allowed.size === 0 || allowed.has(c.req.method))
      return errorResponse(c, "not_found", `No route ${c.req.method} ${path}.`);
    const allow = METHOD_ORDER.filter((m) => allowed.has(m)).join(", ");
    return errorResponse(
      c,
      "method_not_allowed",
      `${c.req.method} is not allowed on ${path}; use ${allow}.`,
      undefined,
      { Allow: allow },
    );
  };
}

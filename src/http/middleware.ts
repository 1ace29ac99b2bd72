import type { Context, MiddlewareHandler } from "hono";
import type { HttpBindings } from "@hono/node-server";
import { bodyLimit } from "hono/body-limit";
import { routePath } from "hono/route";
import { createHash, timingSafeEqual } from "node:crypto";
import { pooledRandomBytes } from "../ids.js";
import { type Logger, requestLines } from "../logger.js";
import type { Metrics } from "../metrics.js";
import { ApiKeyCache } from "../services/clients.js";
import type { ServiceDeps } from "../services/deps.js";
import type { AppEnv } from "./context.js";
import { errorResponse } from "./errors.js";
import { loggedPath } from "./log-path.js";
import { ATTR } from "../telemetry/attributes.js";
import type { Telemetry } from "../telemetry/index.js";

export const MAX_BODY_BYTES = 1024 * 1024;
export const MAX_JSON_DEPTH = 64;

/** Depth of nested arrays and objects (a scalar is 0), walked without recursion; stops counting past `limit`. */
export function nestingDepth(value: unknown, limit: number): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    const d = depth + 1;
    if (d > deepest) deepest = d;
    if (deepest > limit) return deepest;
    for (const child of Object.values(v as Record<string, unknown>)) stack.push([child, d]);
  }
  return deepest;
}

/** A request id: 12 bytes of the process's batched CSPRNG pool (ids.ts), no CSPRNG call per request. */
export const newRequestId = (): string => `req_${pooledRandomBytes(12).toString("base64url")}`;

/**
 * A SERVER span per API request (tracing on; app.ts installs this only then), a child of the
 * caller's `traceparent`; the request's log line and intake run inside it. Named by the matched
 * route, never the path: ids in paths would make every span name unique.
 */
export function traceRequests(tracing: Telemetry): MiddlewareHandler<AppEnv> {
  return (c, next) =>
    tracing.incoming(
      {
        name: c.req.method,
        traceparent: c.req.header("traceparent"),
        tracestate: c.req.header("tracestate"),
        attributes: {
          [ATTR.httpRequestMethod]: c.req.method,
          [ATTR.urlPath]: c.req.path,
          [ATTR.urlScheme]: new URL(c.req.url).protocol.slice(0, -1),
        },
      },
      async (span) => {
        await next();
        const route = routePath(c, -1);
        const status = c.res.status;
        span.setAttributes({ [ATTR.httpRoute]: route || undefined, [ATTR.httpResponseStatusCode]: status });
        span.rename(route ? `${c.req.method} ${route}` : c.req.method);
        if (status >= 500) span.fail(String(status));
      },
    );
}

/**
 * The request's id, its log line and its metrics, in one middleware (each layer of hono's chain
 * costs a promise and a closure per request).
 * The id is always our own: it is what support looks up, so a caller must not be able to choose it,
 * reuse another request's, or inject text into logs (a caller's X-Request-Id is not read). It is
 * answered in X-Request-Id on every response (answerHeader: set on Node's response, so no web
 * `Headers` is built for it). One JSON log line per request, with its id; never headers or bodies
 * (they carry keys).
 */
export function requestLog(logger: Logger, metrics?: Metrics): MiddlewareHandler<AppEnv> {
  const record = requestRecorder(logger, metrics);
  return async (c, next) => {
    const started = performance.now();
    const id = newRequestId();
    c.set("requestId", id);
    answerHeader(c, "X-Request-Id", id);
    await next();
    // The matched route pattern, not the path: ids in paths would explode the label set.
    const route = routePath(c, -1) || "unmatched";
    record(id, c.req.method, c.req.path, route, c.res.status, performance.now() - started, c.get("client")?.id);
  };
}

/**
 * A request's line and metrics once it is answered: requestLog's, and the creations' direct path's
 * (direct-creations.ts), so both write the same line and count under the same labels.
 */
export function requestRecorder(
  logger: Logger,
  metrics?: Metrics,
): (id: string, method: string, path: string, route: string, status: number, ms: number, clientId?: string) => void {
  const write = requestLines(logger);
  const count = metrics ? boundHttpMetrics(metrics) : null;
  return (id, method, path, route, status, ms, clientId) => {
    count?.(route, method, status, ms / 1000);
    const line = {
      request_id: id,
      method,
      path: loggedPath(path),
      status,
      ms: Math.round(ms * 10) / 10,
      client_id: clientId,
    };
    // 503s are the relay saying "not now" (storage, upstream): their cause is logged once, rate-limited.
    write(status >= 500 && status !== 503 ? "error" : status === 503 ? "warn" : "info", line);
  };
}

/**
 * A response header set where it costs least. Served by @hono/node-server, on Node's response
 * itself (`c.env.outgoing`): Node merges it into whatever answer is written, and hono's context
 * keeps no web `Headers` for it, so an answer whose own headers are a plain object goes out
 * without one (@hono/node-server's responseViaCache). Anywhere else (`app.request()` in process),
 * on hono's context. Only for a header every answer from here on should carry, an error's too: it
 * cannot be taken back from Node's response.
 */
export function answerHeader(c: Context, name: string, value: string): void {
  const outgoing = (c.env as Partial<HttpBindings> | undefined)?.outgoing;
  if (outgoing) outgoing.setHeader(name, value);
  else c.header(name, value);
}

/**
 * Counts a request in genrelay_http_requests_total and observes its duration, on label children
 * made once per (route, method, status) rather than label objects twice per request. (prom-client's
 * children still hash their labels on every call: they cost what inc(labels) costs, 0.5 µs, and
 * observe 0.8 µs.) Routes and statuses are few; a method is the caller's, as it was in the label before.
 */
function boundHttpMetrics(metrics: Metrics): (route: string, method: string, status: number, seconds: number) => void {
  type Bound = { duration: { observe(seconds: number): void }; counts: Map<number, { inc(): void }> };
  const byRoute = new Map<string, Map<string, Bound>>();
  return (route, method, status, seconds) => {
    let methods = byRoute.get(route);
    if (!methods) byRoute.set(route, (methods = new Map()));
    let bound = methods.get(method);
    if (!bound)
      methods.set(method, (bound = { duration: metrics.httpDuration.labels(route, method), counts: new Map() }));
    let counter = bound.counts.get(status);
    if (!counter) bound.counts.set(status, (counter = metrics.httpRequests.labels(route, method, String(status))));
    counter.inc();
    bound.duration.observe(seconds);
  };
}

/**
 * A check a request passes before its route: a refusal to answer with, or undefined to go on (it
 * may set the context's variables). Checks run in one middleware (gated), not one layer each.
 */
export type Gate = (c: Context<AppEnv>) => Response | undefined | Promise<Response | undefined>;

/**
 * The checks, then `last` (a middleware: it may wrap what follows), as one layer of hono's chain:
 * each layer costs a promise and a closure per request, a check only its own call. A check that
 * answers synchronously is not awaited.
 */
export function gated(checks: readonly Gate[], last: MiddlewareHandler<AppEnv>): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    for (const check of checks) {
      const verdict = check(c);
      const refusal = verdict instanceof Promise ? await verdict : verdict;
      if (refusal) return refusal;
    }
    return last(c, next);
  };
}

/** `Authorization: Bearer <key>`: the key. */
export const BEARER = /^Bearer\s+(\S+)\s*$/i;

/** The API key's active client, from this process's key cache (services/clients.ts: ApiKeyCache). */
export function bearerAuth(deps: Pick<ServiceDeps, "store" | "clock"> & { apiKeys?: ApiKeyCache | undefined }): Gate {
  const keys = deps.apiKeys ?? new ApiKeyCache(deps);
  return async (c) => {
    const match = BEARER.exec(c.req.header("authorization") ?? "");
    const client = match ? await keys.authenticate(match[1]!) : null;
    if (!client)
      return errorResponse(
        c,
        "invalid_api_key",
        "Missing, unknown or revoked API key. Send Authorization: Bearer <key>.",
      );
    c.set("client", client);
    return undefined;
  };
}

/**
 * 413, closing the connection: the rest of the body may still be on its way, and a pooled client
 * must open a fresh connection for its next request rather than reuse this one.
 */
export function payloadTooLarge(c: Context): Response {
  return errorResponse(c, "payload_too_large", "The request body is larger than 1 MiB.", undefined, {
    Connection: "close",
  });
}

/**
 * `Authorization: Bearer <token>` for operator endpoints (/metrics). Both sides are hashed first so
 * the comparison takes the same time whatever the guess, its length included.
 */
export function tokenAuth(token: string, realm: string): MiddlewareHandler<AppEnv> {
  const expected = createHash("sha256").update(token).digest();
  return async (c, next) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
    const given = createHash("sha256")
      .update(match?.[1] ?? "")
      .digest();
    if (!match || !timingSafeEqual(given, expected)) {
      return errorResponse(
        c,
        "invalid_api_key",
        `Send Authorization: Bearer <token> with the ${realm} token.`,
        undefined,
        {
          "WWW-Authenticate": `Bearer realm="${realm}"`,
        },
      );
    }
    await next();
  };
}

/** The methods whose requests carry a body: each one is bounded unless its path opts out by name. */
const BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);

/**
 * Every POST/PUT/PATCH body is JSON of at most 1 MiB nested at most 64 levels, refused before a
 * validator sees it, whatever route it is for (a route added tomorrow, an unknown path, a method
 * the path does not answer). Only the path prefixes in `ownLimits` opt out, by name: they parse
 * their bodies themselves under a limit of their own (the dashboard's forms). A request with no
 * body at all goes on: whether its route needs one is its validator's business.
 * One middleware, not one per check: every layer of hono's middleware chain costs its own promise.
 */
export function boundedBodies(ownLimits: readonly string[]): MiddlewareHandler<AppEnv> {
  // A chunked body is counted as it is read, and refused once it passes the limit. A body with a
  // declared length skips this: it is checked below, Node's parser stops at that length, and
  // hono's bodyLimit would build a full web Request and stream to ask whether there is a body
  // (a fifth of the intake's CPU), where the lightweight request reads the body directly.
  const counted = bodyLimit({ maxSize: MAX_BODY_BYTES, onError: payloadTooLarge }) as MiddlewareHandler<AppEnv>;
  // Parsing here turns malformed JSON into our 400; the value is kept for the route (jsonBody).
  const parse = async (c: Context<AppEnv>, next: () => Promise<void>): Promise<Response | undefined> => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return errorResponse(c, "invalid_request", "The request body is not valid JSON.");
    }
    // 1 MiB of brackets nests far deeper than the recursive code downstream (hashing, storing,
    // serialising) can walk: refused here rather than ending in a stack overflow and a 500.
    if (nestingDepth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) {
      return errorResponse(c, "invalid_request", `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`);
    }
    c.set("jsonBody", body);
    await next();
    return undefined;
  };
  const isJson = (c: Context<AppEnv>) =>
    /^application\/([\w.-]+\+)?json$/.test((c.req.header("content-type") ?? "").split(";")[0]!.trim().toLowerCase());
  const notJson = (c: Context<AppEnv>) =>
    errorResponse(c, "unsupported_media_type", "Send the body as JSON with Content-Type: application/json.");
  return async (c, next) => {
    if (!BODY_METHODS.has(c.req.method) || ownLimits.some((prefix) => c.req.path.startsWith(prefix))) return next();
    const length = c.req.header("content-length");
    const chunked = c.req.header("transfer-encoding") !== undefined;
    // A declared length over the limit is refused before the body is touched: asking hono for the
    // body makes @hono/node-server wrap the socket in a web stream that pauses it, and a connection
    // left with unread bytes cannot carry the next request.
    if (length !== undefined && !chunked) {
      if (Number(length) > MAX_BODY_BYTES) return payloadTooLarge(c);
      if (Number(length) === 0) return next();
      return isJson(c) ? parse(c, next) : notJson(c);
    }
    // Neither header: over HTTP/1.1 that is no body (a request built in process may still have one).
    if (!chunked && c.req.raw.body === null) return next();
    if (!isJson(c)) return notJson(c);
    // bodyLimit answers with what its `next` resolves to: parse's refusal, if any.
    return counted(c, (() => parse(c, next)) as unknown as () => Promise<void>);
  };
}

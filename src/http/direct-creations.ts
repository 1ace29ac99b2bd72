import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type ServerOptions,
  type ServerResponse,
} from "node:http";
import { withCancelAfter } from "../services/cancel-after.js";
import { ApiKeyCache } from "../services/clients.js";
import type { ServiceDeps } from "../services/deps.js";
import { createTask } from "../services/intake.js";
import { viewOf } from "../services/tasks.js";
import { telemetry } from "../telemetry/index.js";
import { type PiecedJsonText, chunksOfParts, stringifyInParts } from "../upstream/json-text.js";
import type { Metrics } from "../metrics.js";
import { BEARER, MAX_BODY_BYTES, MAX_JSON_DEPTH, nestingDepth, newRequestId, requestRecorder } from "./middleware.js";
import { absoluteUrl, creationSchemas } from "./routes/generations.js";

/** What the direct path takes: the services, the app's metrics and its API key cache (the app's own, when given). */
type DirectDeps = ServiceDeps & { metrics?: Metrics | undefined; apiKeys?: ApiKeyCache | undefined };

/** The creation routes this path serves, by their exact request target (a query string goes to the app). */
const ROUTES: Record<string, "image" | "video"> = {
  "/openapi/v1/images/generations": "image",
  "/openapi/v1/videos/generations": "video",
};
/** The one spelling of a JSON body's media type served here; any other (the app decides: 415, or `{}`) goes to the app. */
const JSON_TYPE = /^application\/json(?:;\s*charset=utf-8)?$/i;
/** A Host @hono/node-server puts into the request's URL as it is (its own test, reValidHost). */
const PLAIN_HOST = /^[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/;

/**
 * The creation routes answered from node:http (issue #43): the same checks, validation and service
 * as the app's route (routes/generations.ts), without hono's middleware chain, context, web request
 * and response for the one request the relay serves most. Only a creation that is accepted (201)
 * or replayed (200) is answered here; every other request, and every creation that is refused or
 * asks for something this path leaves to the app (`Prefer`, tracing on, another media type, no
 * declared length, an unknown key, a query string), is handed to the app's own listener with the
 * body already read (`rawBody`, which @hono/node-server reads instead of the socket), so every
 * refusal is the app's, decided again from the start. That is safe because a refused creation
 * wrote nothing (intake's unit is atomic): deciding it twice answers what the second decision says.
 * An answer from here carries what the app's would: X-Request-Id, Location, Idempotent-Replayed,
 * Content-Type and Content-Length (Genrelay-Sandbox in sandbox mode), its request line and metrics
 * (test/integration/direct-creations.test.ts compares the two paths).
 */
export function directCreations(deps: DirectDeps, app: RequestListener): RequestListener {
  const keys = deps.apiKeys ?? new ApiKeyCache(deps);
  const record = requestRecorder(deps.logger, deps.metrics);
  const sandbox = !deps.config.upstreamBaseUrl;
  const schemas = { image: creationSchemas("image"), video: creationSchemas("video") };
  return (req, res) => {
    const type = req.method === "POST" ? ROUTES[req.url ?? ""] : undefined;
    if (type === undefined || telemetry().on || !servable(req)) {
      app(req, res);
      return;
    }
    const started = performance.now();
    const toApp = (body: Buffer) => {
      (req as IncomingMessage & { rawBody?: Buffer }).rawBody = body;
      app(req, res);
    };
    const failed = (err: unknown) => {
      deps.logger.error({ err }, "direct creation answer failed");
      res.destroy();
    };
    readBody(req).then(async (body) => {
      if (body === null) return void res.destroy();
      const answered = await answer(type, body).catch(() => false);
      if (!answered) toApp(body);
    }, failed);

    /** Answers an accepted or replayed creation; false (nothing sent, nothing written) for the app to decide. */
    async function answer(type: "image" | "video", body: Buffer): Promise<boolean> {
      const client = await keys.authenticate(BEARER.exec(req.headers.authorization ?? "")?.[1] ?? "");
      if (!client) return false;
      const json: unknown = JSON.parse(body.toString("utf8"));
      if (nestingDepth(json, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) return false;
      const { headerSchema, headerNames, bodySchema } = schemas[type];
      const given: Record<string, string> = {};
      for (const name of headerNames) {
        const value = req.headers[name.toLowerCase()];
        if (typeof value === "string") given[name] = value;
      }
      const headers = headerSchema.safeParse(given);
      const parsed = bodySchema.safeParse(json);
      if (!headers.success || !parsed.success || headers.data.Prefer !== undefined) return false;
      const { task, replayed } = await createTask(deps, {
        client,
        type,
        body: withCancelAfter(parsed.data as Record<string, unknown>, headers.data["Cancel-After"]),
        idempotencyKey: headers.data["Idempotency-Key"],
        trace: { traceparent: header(req, "traceparent"), tracestate: header(req, "tracestate") },
      });
      const parts = stringifyInParts(await viewOf(deps, task, { withQueuePosition: false }));
      const status = replayed ? 200 : 201;
      const location = absoluteUrl(deps.config, `http://${req.headers.host}${req.url}`, `/openapi/v1/tasks/${task.id}`);
      // Set once nothing can fail: a header set on Node's response would stay on the app's answer.
      const id = newRequestId();
      res.setHeader("X-Request-Id", id);
      res.setHeader("Location", location);
      res.setHeader("Idempotent-Replayed", String(replayed));
      if (sandbox) res.setHeader("Genrelay-Sandbox", "true");
      // From here the answer is this path's: a failure while it is written cuts it (as the app's stream would).
      writeAnswer(res, status, parts).catch(failed);
      const ms = performance.now() - started;
      record(id, "POST", req.url!, req.url!, status, ms, client.id);
      return true;
    }
  };
}

/** A request this path may read: a JSON body of a declared length within the bound, a plain Host. */
function servable(req: IncomingMessage): boolean {
  const h = req.headers;
  const length = Number(h["content-length"]);
  return (
    h["transfer-encoding"] === undefined &&
    length > 0 &&
    length <= MAX_BODY_BYTES &&
    JSON_TYPE.test(h["content-type"] ?? "") &&
    PLAIN_HOST.test(h.host ?? "")
  );
}

const header = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name];
  return typeof value === "string" ? value : undefined;
};

/** The body of a declared length (Node's parser stops there), or null when the client went away. */
function readBody(req: IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.on("error", () => resolve(null));
  });
}

/** jsonAnswer's bytes: one text with its length, or (a replayed task's output stored in pieces) each piece as it is read. */
async function writeAnswer(res: ServerResponse, status: number, parts: Array<string | PiecedJsonText>): Promise<void> {
  if (parts.length === 1 && typeof parts[0] === "string") {
    res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(parts[0]) });
    res.end(parts[0]);
    return;
  }
  res.writeHead(status, { "Content-Type": "application/json" });
  for await (const chunk of chunksOfParts(parts)) {
    if (!res.write(chunk)) await new Promise((resolve) => res.once("drain", resolve));
  }
  res.end();
}

/**
 * @hono/node-server's `createServer` option: node:http's server, with the creation routes answered
 * on the direct path before the app's listener (main.ts, and the tests' served relays).
 */
export function serverWithDirectCreations(deps: DirectDeps): typeof createServer {
  return ((options: ServerOptions, app: RequestListener) =>
    createServer(options, directCreations(deps, app))) as typeof createServer;
}

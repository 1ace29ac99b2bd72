import type { OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { Config } from "../../config.js";
import type { ServiceDeps } from "../../services/deps.js";
import { createTask } from "../../services/intake.js";
import { withCancelAfter } from "../../services/cancel-after.js";
import { hasEnded, holdFor, waitForTask, waitPreference } from "../../services/task-wait.js";
import { viewOf } from "../../services/tasks.js";
import type { AppEnv } from "../context.js";
import { validationFailure } from "../errors.js";
import { jsonAnswer } from "../json-answer.js";
import { answerHeader } from "../middleware.js";
import { apiRoute, headerRefs } from "../schema-rules.js";
import {
  apiKeySecurity,
  errorResponses,
  idempotencyHeaders,
  ImageGenerationBody,
  TaskViewSchema,
  VideoGenerationBody,
} from "../schemas.js";

/**
 * An absolute URL for a path of this API: under PUBLIC_BASE_URL when set, so a caller's Host header
 * (or a proxy's internal address) never reaches a Location; otherwise from the request's own URL.
 */
export function absoluteUrl(config: Pick<Config, "publicBaseUrl">, requestUrl: string, path: string): string {
  if (config.publicBaseUrl) return `${config.publicBaseUrl}${path}`;
  // A path of plain segments resolves to the request's scheme and authority followed by the path
  // itself: those are parsed (and normalized) by URL once per distinct prefix, not once per answer.
  const authorityAt = requestUrl.indexOf("//");
  const pathAt = authorityAt < 0 ? -1 : requestUrl.indexOf("/", authorityAt + 2);
  if (pathAt < 0 || !PLAIN_PATH.test(path)) return new URL(path, requestUrl).toString();
  const prefix = requestUrl.slice(0, pathAt);
  // One entry, the last prefix seen: the Host header is the caller's, so nothing may accumulate.
  if (lastOrigin?.prefix !== prefix) lastOrigin = { prefix, origin: new URL("/", prefix).toString().slice(0, -1) };
  return `${lastOrigin.origin}${path}`;
}

const PLAIN_PATH = /^(\/[A-Za-z0-9_-]+)+$/;
let lastOrigin: { prefix: string; origin: string } | undefined;

function generationRoute(type: "image" | "video") {
  return apiRoute({
    method: "post",
    path: `/openapi/v1/${type}s/generations`,
    operationId: type === "image" ? "createImageTask" : "createVideoTask",
    tags: ["Generations"],
    summary: `Create ${type === "image" ? "an image" : "a video"} task`,
    description:
      "Stores the task durably and answers at once; the relay submits it upstream, polls it, and sends a signed webhook to callback_url when it ends.",
    security: apiKeySecurity,
    request: {
      headers: idempotencyHeaders(type),
      body: {
        required: true,
        content: { "application/json": { schema: type === "image" ? ImageGenerationBody : VideoGenerationBody } },
      },
    },
    responses: {
      201: {
        description: "Task accepted (status queued; with Prefer: wait, its state when it ended or the wait ran out)",
        headers: headerRefs("Location", "Idempotent-Replayed", "Preference-Applied"),
        content: { "application/json": { schema: TaskViewSchema } },
      },
      200: {
        description: "Replay of the same Idempotency-Key and body: the original task",
        headers: headerRefs("Location", "Idempotent-Replayed", "Preference-Applied"),
        content: { "application/json": { schema: TaskViewSchema } },
      },
      ...errorResponses(400, 401, 402, 409, 413, 415, 422, 429),
    },
  });
}

/**
 * The creation routes, documented as every route (the same route definition in the registry) and
 * validated in one step rather than by zod-openapi's three middlewares: the same schemas, the same
 * order (headers, then the media type, then the body) and the same refusals (the app's defaultHook,
 * validationFailure; a non-JSON media type the same HTTPException 415). The header schema's few
 * names are read one by one from the request, never the whole header list turned into a web
 * `Headers`, and the schemas, which refine synchronously, are parsed without a promise each.
 */
export function registerGenerationRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  for (const type of ["image", "video"] as const) {
    const route = generationRoute(type);
    app.openAPIRegistry.registerPath(route);
    const { headerSchema, headerNames, bodySchema } = creationSchemas(type);
    app.post(route.path, async (c) => {
      const given: Record<string, string> = {};
      for (const name of headerNames) {
        const value = c.req.header(name);
        if (value !== undefined) given[name] = value;
      }
      const headers = headerSchema.safeParse(given);
      if (!headers.success) return validationFailure(c, "header", headers.error);
      const contentType = c.req.header("content-type");
      if (contentType ? !JSON_REQUEST.test(contentType) : await hasRequestBody(c))
        throw new HTTPException(415, { message: "Unsupported Media Type" });
      // boundedBodies parsed the body already (jsonBody); another media type validates {}.
      const json = contentType && JSON_MEDIA_TYPE.test(contentType.split(";")[0]!.trim().toLowerCase());
      const parsed = bodySchema.safeParse(json ? (c.get("jsonBody") ?? (await c.req.json())) : {});
      if (!parsed.success) return validationFailure(c, "json", parsed.error);
      return create(c, deps, type, headers.data, parsed.data as Record<string, unknown>);
    });
  }
}

/** A creation route's header schema, the names it reads, and its body schema (the direct path's too: direct-creations.ts). */
export function creationSchemas(type: "image" | "video") {
  const headerSchema = idempotencyHeaders(type);
  return {
    headerSchema,
    headerNames: Object.keys(headerSchema.shape),
    bodySchema: type === "image" ? ImageGenerationBody : VideoGenerationBody,
  };
}

/** zod-openapi's media-type gate for a JSON body (a type outside it: 415). */
const JSON_REQUEST = /^application\/([a-z-.]+\+)?json(;\s*[a-zA-Z0-9-]+=([^;]+))*$/i;
/** hono's json validator: a media type outside it validates `{}`. */
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/** zod-openapi's test for a body sent without a Content-Type (none reaches here past boundedBodies over HTTP). */
async function hasRequestBody(c: Context<AppEnv>): Promise<boolean> {
  const raw = c.req.raw;
  if (raw.body === null) return false;
  if (raw.bodyUsed) return (await c.req.arrayBuffer()).byteLength > 0;
  return (await raw.clone().arrayBuffer()).byteLength > 0;
}

async function create(
  c: Context<AppEnv>,
  deps: ServiceDeps,
  type: "image" | "video",
  headers: { "Idempotency-Key": string; Prefer?: string | undefined; "Cancel-After"?: string | undefined },
  validBody: Record<string, unknown>,
): Promise<Response> {
  const body = withCancelAfter(validBody, headers["Cancel-After"]);
  const client = c.get("client");
  // Taken before the task is created, so a client over its bound gets 429 and no task.
  const wait = deps.waiters ? waitPreference(headers.Prefer) : null;
  const hold = wait !== null && deps.waiters ? await holdFor(deps, deps.waiters, client.id, wait) : null;
  let created: Awaited<ReturnType<typeof createTask>>;
  try {
    created = await createTask(deps, {
      client,
      type,
      body,
      idempotencyKey: headers["Idempotency-Key"],
      trace: { traceparent: c.req.header("traceparent"), tracestate: c.req.header("tracestate") },
    });
  } catch (err) {
    await hold?.release();
    throw err;
  }
  const { replayed } = created;
  const task = hold
    ? await waitForTask(deps, hold, client.id, created.task.id, hasEnded, c.req.raw.signal)
    : created.task;
  const view = await viewOf(deps, task, { withQueuePosition: hold !== null });
  // Set last, once nothing can fail (answerHeader's cannot be taken back); with the answer's one
  // Content-Type header, no web `Headers` is built for this answer.
  answerHeader(c, "Location", absoluteUrl(deps.config, c.req.url, `/openapi/v1/tasks/${task.id}`));
  answerHeader(c, "Idempotent-Replayed", String(replayed));
  if (hold) answerHeader(c, "Preference-Applied", `wait=${wait}`);
  return jsonAnswer(c, view, replayed ? 200 : 201);
}

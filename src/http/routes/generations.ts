import type { OpenAPIHono } from "@hono/zod-openapi";
import type { Config } from "../../config.js";
import type { ServiceDeps } from "../../services/deps.js";
import { createTask } from "../../services/intake.js";
import { withCancelAfter } from "../../services/cancel-after.js";
import { hasEnded, holdFor, waitForTask, waitPreference } from "../../services/task-wait.js";
import { viewOf } from "../../services/tasks.js";
import type { AppEnv } from "../context.js";
import { jsonAnswer } from "../json-answer.js";
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

export function registerGenerationRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps): void {
  for (const type of ["image", "video"] as const) {
    app.openapi(generationRoute(type), async (c) => {
      const headers = c.req.valid("header");
      const body = withCancelAfter(c.req.valid("json") as Record<string, unknown>, headers["Cancel-After"]);
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
      c.header("Location", absoluteUrl(deps.config, c.req.url, `/openapi/v1/tasks/${task.id}`));
      c.header("Idempotent-Replayed", String(replayed));
      if (hold) c.header("Preference-Applied", `wait=${wait}`);
      return jsonAnswer(c, await viewOf(deps, task, { withQueuePosition: hold !== null }), replayed ? 200 : 201);
    });
  }
}

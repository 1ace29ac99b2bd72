import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import type { Subscription } from "../../core/stream-hub.js";
import type { DeliveryService } from "../../services/deliveries.js";
import type { ServiceDeps } from "../../services/deps.js";
import {
  eventStreamStart,
  followClient,
  followTask,
  openStream,
  type Send,
  taskStreamStart,
} from "../../services/streams.js";
import { clientOfStreamToken, issueStreamToken } from "../../services/stream-tokens.js";
import { iso } from "../../core/task-view.js";
import type { Config } from "../../config.js";
import { cors } from "hono/cors";
import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../context.js";
import { absoluteUrl } from "./generations.js";
import { apiRoute } from "../schema-rules.js";
import { apiKeySecurity, errorResponses, FeedAfterParam, TaskIdParam } from "../schemas.js";

const TASK_STREAM = /^\/openapi\/v1\/tasks\/[^/]+\/events$/;

/**
 * A task stream read with `?token=` and no Authorization header (a browser's EventSource, which
 * cannot send one): the route checks the token itself, so the API-key middleware lets it through.
 */
export function isStreamTokenRequest(c: {
  req: {
    method: string;
    path: string;
    query(name: string): string | undefined;
    header(name: string): string | undefined;
  };
}): boolean {
  return (
    c.req.method === "GET" &&
    TASK_STREAM.test(c.req.path) &&
    c.req.query("token") !== undefined &&
    c.req.header("authorization") === undefined
  );
}

/** CORS for the stream routes only, for the origins STREAM_CORS_ORIGINS lists (none: no CORS at all). */
export function streamCors(app: OpenAPIHono<AppEnv>, config: Pick<Config, "streamCorsOrigins">): void {
  if (config.streamCorsOrigins.length === 0) return;
  const allow: MiddlewareHandler = cors({
    origin: config.streamCorsOrigins,
    allowMethods: ["GET"],
    allowHeaders: ["Authorization", "Last-Event-ID"],
    maxAge: 600,
  });
  app.use("/openapi/v1/tasks/:id/events", allow);
  app.use("/openapi/v1/events/stream", allow);
}

const StreamTokenSchema = z
  .object({
    data: z.object({
      token: z.string().openapi({ description: "Pass it as ?token= to the task's event stream; never logged." }),
      expires_at: z.string().openapi({ description: "15 minutes from now (ISO-8601)." }),
      url: z
        .string()
        .openapi({ description: "The task's event stream with the token, ready for new EventSource(url)." }),
    }),
  })
  .openapi("StreamToken");

const LastEventIdHeader = z
  .string()
  .max(200)
  .optional()
  .openapi({
    param: {
      name: "Last-Event-ID",
      in: "header",
      description:
        "The id of the last event received (EventSource sends it when it reconnects): the stream resumes after it, without loss or repeat.",
    },
  });

const EVENT_STREAM_DESCRIPTION = [
  "text/event-stream. Each of the events as `id:` (the event id, the webhook-id), `event:` (its type) and `data:` (the webhook body);",
  "`event: task.progress` (no id) carries `{type, timestamp, data: {id, status, queue_position, estimated_completion_at}}`, at most every 5 s while a task waits or runs;",
  "a comment line (`: keep-alive`) every 15 s.",
].join(" ");

const eventStream = {
  "text/event-stream": {
    schema: z.string().openapi({
      description: EVENT_STREAM_DESCRIPTION,
      example:
        'id: evt_01jf3y8k2m9q7r5t3v1w0x6z4b\nevent: task.succeeded\ndata: {"id":"evt_01jf3y8k2m9q7r5t3v1w0x6z4b","type":"task.succeeded","timestamp":"2026-01-01T00:00:40.000Z","data":{"id":"task_01jf3y8k2m9q7r5t3v1w0x6z4a","status":"succeeded"}}\n\n',
    }),
  },
};

/** Writes the subscription's events as server-sent events; ends the subscription when the caller goes. */
function serve(c: Context<AppEnv>, sub: Subscription, follow: (send: Send) => Promise<void>): Response {
  c.header("X-Accel-Buffering", "no");
  return streamSSE(c, async (stream) => {
    const gone = () => sub.close();
    stream.onAbort(gone);
    c.req.raw.signal.addEventListener("abort", gone, { once: true });
    sub.onKeepAlive = () => void stream.write(": keep-alive\n\n");
    try {
      // Opens the stream at once (proxies and EventSource see the headers before any event).
      await stream.write(": stream open\n\n");
      await follow((m) => stream.writeSSE(m));
    } finally {
      c.req.raw.signal.removeEventListener("abort", gone);
      await sub.release();
    }
  });
}

export function registerStreamRoutes(app: OpenAPIHono<AppEnv>, deps: ServiceDeps, deliveries: DeliveryService): void {
  const hub = deps.streams;
  if (!hub) return;

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/tasks/{id}/events",
      operationId: "streamTaskEvents",
      tags: ["Tasks"],
      summary: "Follow a task's events live (server-sent events)",
      description:
        "Every event of the task so far, then each as it is recorded, with task.progress while it waits or runs; the stream ends after the terminal event (succeeded, failed, canceled, expired). A browser passes ?token= from POST /openapi/v1/tasks/{id}/stream-tokens instead of the Authorization header.",
      security: apiKeySecurity,
      request: {
        params: TaskIdParam,
        query: z.object({
          token: z
            .string()
            .max(500)
            .optional()
            .openapi({
              param: {
                name: "token",
                in: "query",
                description:
                  "A stream token of POST /openapi/v1/tasks/{id}/stream-tokens, instead of the Authorization header (EventSource cannot send one).",
              },
            }),
        }),
        headers: z.object({ "Last-Event-ID": LastEventIdHeader }),
      },
      responses: {
        200: { description: "The task's event stream", content: eventStream },
        ...errorResponses(400, 401, 404, 429),
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const token = c.req.valid("query").token;
      const clientId = (c.get("client") ?? (await clientOfStreamToken(deps, token ?? "", id))).id;
      const after = await taskStreamStart(deps, clientId, id, c.req.valid("header")["Last-Event-ID"]);
      const sub = await openStream(deps, hub, clientId);
      return serve(c, sub, (send) => followTask(deps, sub, clientId, id, after, send)) as never;
    },
  );

  app.openapi(
    apiRoute({
      method: "get",
      path: "/openapi/v1/events/stream",
      operationId: "streamEvents",
      tags: ["Webhooks"],
      summary: "Follow all your events live (server-sent events)",
      description:
        "Your webhook events as they are recorded, from a feed position: after=<cursor of GET /openapi/v1/events>, or Last-Event-ID, or (neither) from now on. The stream does not end by itself.",
      security: apiKeySecurity,
      request: {
        query: z.object({ after: FeedAfterParam }),
        headers: z.object({ "Last-Event-ID": LastEventIdHeader }),
      },
      responses: {
        200: { description: "Your event stream", content: eventStream },
        ...errorResponses(400, 401, 429),
      },
    }),
    async (c) => {
      const clientId = c.get("client").id;
      const after = await eventStreamStart(
        deps,
        clientId,
        c.req.valid("header")["Last-Event-ID"],
        (cursor) => deliveries.feedPosition(clientId, cursor),
        c.req.valid("query").after,
      );
      const sub = await openStream(deps, hub, clientId);
      return serve(c, sub, (send) => followClient(deps, sub, clientId, after, send)) as never;
    },
  );

  app.openapi(
    apiRoute({
      method: "post",
      path: "/openapi/v1/tasks/{id}/stream-tokens",
      operationId: "createStreamToken",
      tags: ["Tasks"],
      summary: "A token a browser follows one task's event stream with",
      description:
        "Valid 15 minutes, for this task's stream only (GET /openapi/v1/tasks/{id}/events?token=…); hand it to the page, never your API key. Its stream counts against your key's open streams.",
      security: apiKeySecurity,
      request: { params: TaskIdParam },
      responses: {
        201: { description: "The token", content: { "application/json": { schema: StreamTokenSchema } } },
        ...errorResponses(400, 401, 404),
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const { token, expiresAt } = await issueStreamToken(deps, c.get("client"), id);
      const url = `${absoluteUrl(deps.config, c.req.url, `/openapi/v1/tasks/${id}/events`)}?token=${token}`;
      return c.json({ data: { token, expires_at: iso(expiresAt)!, url } }, 201);
    },
  );
}

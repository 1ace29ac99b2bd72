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
import type { AppEnv } from "../context.js";
import { apiRoute } from "../schema-rules.js";
import { errorResponses, FeedAfterParam, TaskIdParam } from "../schemas.js";

const security = [{ bearerAuth: [] }];

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
      sub.release();
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
      security,
      request: {
        params: TaskIdParam,
        headers: z.object({ "Last-Event-ID": LastEventIdHeader }),
      },
      responses: {
        200: { description: "The task's event stream", content: eventStream },
        ...errorResponses(400, 401, 404, 429),
      },
    }),
    async (c) => {
      const clientId = c.get("client").id;
      const { id } = c.req.valid("param");
      const after = await taskStreamStart(deps, clientId, id, c.req.valid("header")["Last-Event-ID"]);
      const sub = openStream(hub, clientId);
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
      security,
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
      const sub = openStream(hub, clientId);
      return serve(c, sub, (send) => followClient(deps, sub, clientId, after, send)) as never;
    },
  );
}

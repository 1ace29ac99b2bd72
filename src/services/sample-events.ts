import { TASK_EVENT_TYPES, type TaskEventType } from "../core/transition.js";
import type { TaskStatus } from "../statuses.js";
import { catalogModels } from "./catalog-check.js";
import { flatTask, type TaskViewRow } from "../core/task-view.js";
import { destinationHost } from "../webhooks/destination.js";

/**
 * Sample events for `POST /openapi/v1/webhooks/test` (docs/contract.md, "Sample events"): a low-code tool learns a
 * payload's structure from its first request, so a task type's sample is built by the code that
 * builds real task events (flatTask), for the catalog's first model of its kind, with
 * `data.sample: true` so a receiver can tell it from a real one.
 */
export const NOTICE_EVENT_TYPES = ["endpoint.failing", "endpoint.recovered", "delivery.exhausted"] as const;
export const TEST_EVENT_TYPES = ["ping", ...TASK_EVENT_TYPES, ...NOTICE_EVENT_TYPES] as const;
export type TestEventType = (typeof TEST_EVENT_TYPES)[number];

const FALLBACK_MODEL = { image: "p-image", video: "v-video" } as const;

/** The catalog's first model of a kind, or a stand-in when no catalog is cached (or it lists none). */
export function firstModel(catalog: unknown, kind: "image" | "video"): string {
  return catalogModels(catalog ?? {}).find((m) => m.type === kind)?.id ?? FALLBACK_MODEL[kind];
}

function sampleOutput(kind: "image" | "video", id: string): unknown {
  return kind === "image"
    ? { images: [{ url: `https://example.com/genrelay-sample/${id}-0.png`, width: 1024, height: 1024 }] }
    : { video: { url: `https://example.com/genrelay-sample/${id}.mp4`, duration: 5 } };
}

const SAMPLE_ERROR = {
  code: "validation_error",
  message: "Sample failure: the upstream refused the request (this is a test event).",
  request_id: "req_sample",
};

/** The `data` of a sample task event, shaped exactly like a real one. */
export function sampleTaskData(
  type: TaskEventType,
  opts: { kind: "image" | "video"; model: string; clientId: string; url: string; id: string; now: number },
): Record<string, unknown> {
  const status = type.slice("task.".length) as TaskStatus;
  const ended = status !== "processing";
  const row: TaskViewRow = {
    id: opts.id,
    type: opts.kind,
    model: opts.model,
    status,
    // Its estimate is never known (flatTask's default), so the phase changes nothing in the body.
    phase: ended ? "done" : "submitted",
    createdAt: opts.now - 30_000,
    updatedAt: opts.now,
    completedAt: ended ? opts.now : null,
    upstreamTaskId: status === "canceled" ? null : "up_sample",
    // A cancel by the client or an operator carries no error, like a real task.canceled.
    errorJson: status === "failed" ? JSON.stringify(SAMPLE_ERROR) : null,
    metadataJson: JSON.stringify({ sample: "true" }),
    callbackUrl: opts.url,
    callbackEvents: JSON.stringify(TASK_EVENT_TYPES),
    outputJson: status === "succeeded" ? JSON.stringify(sampleOutput(opts.kind, opts.id)) : null,
    outputRef: null,
    pointsCharged: status === "succeeded" ? (opts.kind === "image" ? 40 : 500) : status === "failed" ? 0 : null,
    pointsRefunded: status === "succeeded" || status === "failed" ? 0 : null,
    filesJson: null,
  };
  const previous: TaskStatus = status === "processing" || status === "canceled" ? "queued" : "processing";
  return {
    ...flatTask(row),
    sequence: status === "processing" || status === "canceled" ? 1 : 2,
    previous_status: previous,
    sample: true,
  };
}

/** The whole body of a test event (`id` is the webhook-id, as in every event). */
export function sampleBody(
  type: TestEventType,
  opts: { eventId: string; clientId: string; url: string; now: number; kind: "image" | "video"; catalog: unknown },
): string {
  const timestamp = new Date(opts.now).toISOString();
  if (type === "ping") {
    return JSON.stringify({
      id: opts.eventId,
      type,
      timestamp,
      data: { client_id: opts.clientId, message: "genrelay test webhook" },
    });
  }
  const host = destinationHost(opts.url);
  const since = new Date(opts.now - 3_600_000).toISOString();
  const id = `task_sample${opts.eventId.slice(4, 19)}`;
  if (type === "endpoint.failing") {
    return JSON.stringify({
      id: opts.eventId,
      type,
      timestamp,
      data: { host, failing_since: since, attempts: 12, pending_events: 3, last_error: "HTTP 503", sample: true },
    });
  }
  if (type === "endpoint.recovered") {
    return JSON.stringify({
      id: opts.eventId,
      type,
      timestamp,
      data: { host, failing_since: since, recovered_at: timestamp, sample: true },
    });
  }
  if (type === "delivery.exhausted") {
    const data = {
      event_id: `evt_sample${opts.eventId.slice(4, 20)}`,
      task_id: id,
      type: "task.succeeded",
      host,
      attempts: 8,
      last_error: "HTTP 500",
      sample: true,
    };
    return JSON.stringify({ id: opts.eventId, type, timestamp, data });
  }
  const data = sampleTaskData(type, {
    kind: opts.kind,
    model: firstModel(opts.catalog, opts.kind),
    clientId: opts.clientId,
    url: opts.url,
    id,
    now: opts.now,
  });
  return JSON.stringify({ id: opts.eventId, type, timestamp, data });
}

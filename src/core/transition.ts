import { newId } from "../ids.js";
import type { TaskStatus } from "../statuses.js";
import type { TransitionRules } from "../store/store.js";
import type { NewTaskRow } from "../store/rows.js";
import { estimateCompletion } from "./eta.js";
import { flatTask } from "./task-view.js";
import { fitTaskData, WEBHOOK_BODY_MAX_BYTES } from "./body-limit.js";
import { storableErrorJson } from "./stored-text.js";
import { destinationHost } from "../webhooks/destination.js";

export const TASK_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"] as const;
export type TaskEventType = (typeof TASK_EVENT_TYPES)[number];
export const DEFAULT_CALLBACK_EVENTS: TaskEventType[] = ["task.succeeded", "task.failed", "task.canceled"];
export const TERMINAL_STATUSES: ReadonlySet<TaskStatus> = new Set(["succeeded", "failed", "canceled"]);

export function eventTypeFor(status: TaskStatus): TaskEventType | null {
  return status === "queued" ? null : (`task.${status}` as TaskEventType);
}

/**
 * The rules every task change follows, whatever the store: the store runs them inside the
 * transaction that applies the change (see TaskStore.transition).
 * - A reservation ends once the charge is known or the task is done; the change of charge, refund
 *   and reservation goes to the client's books; a first charge teaches the price of its price key;
 *   credits coming back wake the client's waiting tasks.
 * - A new status writes the outbox event the caller subscribed to, which is what makes delivery
 *   at-least-once: no state change without its event.
 */
export const transitionRules: TransitionRules = {
  prepare(before, patch) {
    const next: Partial<NewTaskRow> = { ...patch };
    // What a task stores is bounded: an upstream's error message of any length is kept cut.
    if (typeof next.errorJson === "string") next.errorJson = storableErrorJson(next.errorJson);
    const charged = next.pointsCharged !== undefined ? next.pointsCharged : before.pointsCharged;
    if ((next.phase ?? before.phase) === "done" || (charged !== null && charged !== undefined)) next.pointsReserved = 0;
    return next;
  },

  settle(before, after) {
    const change = {
      charged: (after.pointsCharged ?? 0) - (before.pointsCharged ?? 0),
      refunded: (after.pointsRefunded ?? 0) - (before.pointsRefunded ?? 0),
      reserved: after.pointsReserved - before.pointsReserved,
    };
    const learns =
      after.priceKey &&
      after.pointsCharged !== null &&
      after.pointsCharged > 0 &&
      after.pointsCharged !== before.pointsCharged;
    return {
      change,
      learn: learns ? { priceKey: after.priceKey, points: after.pointsCharged! } : null,
      // Room came back (or a charge turned out lower than held): tasks that waited for it may go now.
      wake: after.pointsReserved < before.pointsReserved,
    };
  },

  eventFor(before, after, now, firstAttemptDelayMs, expectedDurationMs = null, endpointEvents = []) {
    if (after.status === before.status) return null;
    const type = eventTypeFor(after.status);
    if (!type) return null;
    // The task's callback gets the types it subscribed to; the client's endpoints theirs (the event
    // is then written for them, its own row `none`).
    const subscribed = (JSON.parse(after.callbackEvents) as string[]).includes(type);
    if (!subscribed && !endpointEvents.includes(type)) return null;
    const toCallback = subscribed && after.callbackUrl !== null;
    const sequence = after.eventSequence + 1;
    const id = newId("evt", now);
    // `id` is the webhook-id header too, so tools that see only the body (Zapier) can deduplicate.
    // A running task's end from its model's median (docs/contract.md, "When will it finish"); a
    // waiting task's needs its queue position, which the transaction does not count: null.
    const estimatedCompletionAt =
      after.phase === "waiting"
        ? null
        : estimateCompletion({
            phase: after.phase,
            submittedAt: after.submittedAt,
            now,
            medianMs: expectedDurationMs,
            ahead: null,
            capacity: Number.POSITIVE_INFINITY,
          });
    const flat = flatTask(after, undefined, {
      maxOutputBytes: WEBHOOK_BODY_MAX_BYTES,
      estimatedCompletionAt,
    });
    const timestamp = new Date(now).toISOString();
    // The body is held to the size the dispatcher sends, by its bytes: whatever makes it too large
    // (an output, an error message, files) is left out or cut, with a flag, and the webhook still
    // goes out; the receiver reads the whole task with GET /tasks/{id}.
    const { json } = fitTaskData(
      { ...flat, sequence, previous_status: before.status },
      WEBHOOK_BODY_MAX_BYTES,
      (data) => ({ id, type, timestamp, data }),
    );
    return {
      id,
      clientId: after.clientId,
      taskId: after.id,
      type,
      sequence,
      payload: json,
      callbackUrl: after.callbackUrl,
      destinationHost: after.callbackUrl ? destinationHost(after.callbackUrl) : "",
      // The task's own headers (sealed) travel with its events: every attempt sends them.
      callbackHeaders: after.callbackHeaders,
      // And its trace context: every attempt continues the caller's trace (docs/operations.md, "Tracing").
      traceparent: after.traceparent,
      tracestate: after.tracestate,
      deliveryStatus: toCallback ? "pending" : "none",
      nextAttemptAt: toCallback ? now + firstAttemptDelayMs : null,
      createdAt: now,
    };
  },
};

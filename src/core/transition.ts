import { newId } from "../ids.js";
import type { TaskStatus } from "../statuses.js";
import type { NewTaskRow, TransitionRules } from "../store/store.js";
import { flatTask } from "./task-view.js";
import { destinationHost } from "../webhooks/destination.js";

export const TASK_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"] as const;
export type TaskEventType = (typeof TASK_EVENT_TYPES)[number];
export const DEFAULT_CALLBACK_EVENTS: TaskEventType[] = ["task.succeeded", "task.failed", "task.canceled"];
export const TERMINAL_STATUSES: ReadonlySet<TaskStatus> = new Set(["succeeded", "failed", "canceled"]);

/**
 * The largest output (JSON characters) an event carries inline: well under the dispatcher's
 * 256 KiB body limit, leaving room for the rest of the task. A larger one is read with GET /tasks/{id}.
 */
export const INLINE_OUTPUT_MAX_CHARS = 192 * 1024;

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
    const learns = after.priceKey && after.pointsCharged !== null && after.pointsCharged > 0 && after.pointsCharged !== before.pointsCharged;
    return {
      change,
      learn: learns ? { priceKey: after.priceKey, points: after.pointsCharged! } : null,
      // Room came back (or a charge turned out lower than held): tasks that waited for it may go now.
      wake: after.pointsReserved < before.pointsReserved,
    };
  },

  eventFor(before, after, now, firstAttemptDelayMs) {
    if (after.status === before.status) return null;
    const type = eventTypeFor(after.status);
    const subscribed = JSON.parse(after.callbackEvents) as string[];
    if (!type || !subscribed.includes(type)) return null;
    const sequence = after.eventSequence + 1;
    const id = newId("evt", now);
    // `id` is the webhook-id header too, so tools that see only the body (Zapier) can deduplicate.
    const data: Record<string, unknown> = { ...flatTask({ ...after, eventSequence: sequence }), sequence, previous_status: before.status };
    // An output too large to carry is left out of the event (and so stored once, in the task):
    // the webhook still goes out, saying so, and the receiver reads the output from the task.
    if ((after.outputJson?.length ?? 0) > INLINE_OUTPUT_MAX_CHARS) {
      data.output = null;
      data.output_omitted = true;
    }
    const body = { id, type, timestamp: new Date(now).toISOString(), data };
    return {
      id,
      clientId: after.clientId,
      taskId: after.id,
      type,
      sequence,
      payload: JSON.stringify(body),
      callbackUrl: after.callbackUrl,
      destinationHost: after.callbackUrl ? destinationHost(after.callbackUrl) : "",
      // The task's own headers (sealed) travel with its events: every attempt sends them.
      callbackHeaders: after.callbackHeaders,
      deliveryStatus: after.callbackUrl ? "pending" : "none",
      nextAttemptAt: after.callbackUrl ? now + firstAttemptDelayMs : null,
      createdAt: now,
    };
  },
};

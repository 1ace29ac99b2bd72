import { newId } from "../ids.js";
import { insertEvent } from "../db/events.js";
import type { TaskStatus } from "../db/schema.js";
import { updateLeasedTask, updateTask, type NewTaskRow, type TaskRow } from "../db/tasks.js";
import type { DbOrTx } from "../db/tx.js";
import { flatTask } from "./task-view.js";

export const TASK_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"] as const;
export type TaskEventType = (typeof TASK_EVENT_TYPES)[number];
export const DEFAULT_CALLBACK_EVENTS: TaskEventType[] = ["task.succeeded", "task.failed", "task.canceled"];
export const TERMINAL_STATUSES: ReadonlySet<TaskStatus> = new Set(["succeeded", "failed", "canceled"]);

export function eventTypeFor(status: TaskStatus): TaskEventType | null {
  return status === "queued" ? null : (`task.${status}` as TaskEventType);
}

/**
 * Applies a change to a task and, in the same transaction, writes the outbox event its new
 * status calls for (when the caller subscribed to that type). This is the only place that writes
 * task events, which is what makes delivery at-least-once: no state change without its event.
 * Returns the updated row, or undefined when the lease (token) no longer holds.
 */
export function transitionTask(
  db: DbOrTx,
  task: TaskRow,
  patch: Partial<NewTaskRow>,
  opts: { now: number; token?: string | null; firstAttemptDelayMs?: number | undefined },
): TaskRow | undefined {
  return db.transaction((tx) => {
    const updated = opts.token ? updateLeasedTask(tx, task.id, opts.token, patch) : updateTask(tx, task.id, patch);
    if (!updated) return undefined;
    if (updated.status === task.status) return updated;
    const type = eventTypeFor(updated.status);
    const subscribed: string[] = JSON.parse(updated.callbackEvents) as string[];
    if (!type || !subscribed.includes(type)) return updated;

    const sequence = updated.eventSequence + 1;
    const withSeq = updateTask(tx, updated.id, { eventSequence: sequence })!;
    const eventId = newId("evt", opts.now);
    const body = {
      type,
      timestamp: new Date(opts.now).toISOString(),
      data: { ...flatTask(withSeq), sequence, previous_status: task.status },
    };
    insertEvent(tx, {
      id: eventId,
      clientId: withSeq.clientId,
      taskId: withSeq.id,
      type,
      sequence,
      payload: JSON.stringify(body),
      callbackUrl: withSeq.callbackUrl,
      deliveryStatus: withSeq.callbackUrl ? "pending" : "none",
      nextAttemptAt: withSeq.callbackUrl ? opts.now + (opts.firstAttemptDelayMs ?? 0) : null,
      createdAt: opts.now,
    });
    return withSeq;
  });
}

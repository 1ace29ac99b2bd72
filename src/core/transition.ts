import { newId } from "../ids.js";
import { applyCreditChange, learnPrice } from "../db/credits.js";
import { insertEvent, nextClientEventSeq } from "../db/events.js";
import type { TaskStatus } from "../db/schema.js";
import { findTask, updateLeasedTask, updateTask, wakeWaitingOfClient, type NewTaskRow, type TaskRow } from "../db/tasks.js";
import type { DbOrTx } from "../db/tx.js";
import { flatTask } from "../services/task-view.js";
import { destinationHost } from "../webhooks/destination.js";

export const TASK_EVENT_TYPES = ["task.processing", "task.succeeded", "task.failed", "task.canceled"] as const;
export type TaskEventType = (typeof TASK_EVENT_TYPES)[number];
export const DEFAULT_CALLBACK_EVENTS: TaskEventType[] = ["task.succeeded", "task.failed", "task.canceled"];
export const TERMINAL_STATUSES: ReadonlySet<TaskStatus> = new Set(["succeeded", "failed", "canceled"]);

export function eventTypeFor(status: TaskStatus): TaskEventType | null {
  return status === "queued" ? null : (`task.${status}` as TaskEventType);
}

export interface TransitionOptions {
  now: number;
  /** The caller's lease: the change applies only while it still holds. */
  token?: string | null;
  /** Delay before the first delivery attempt of the event this change writes. */
  firstAttemptDelayMs?: number | undefined;
}

/**
 * The one primitive every task change goes through (the lifecycle verbs build on it). In one
 * transaction it:
 * - applies the patch, only while the caller's lease holds;
 * - keeps the credit books: a reservation ends once the charge is known or the task is done, and
 *   the change of charge, refund and reservation goes to the client's ledger; a first charge
 *   teaches the price of the task's price key;
 * - writes the outbox event the new status calls for (when the caller subscribed to it), which is
 *   what makes delivery at-least-once: no state change without its event.
 * Returns the updated row, or undefined when the task is gone or the lease no longer holds.
 */
export function transitionTask(db: DbOrTx, task: TaskRow, patch: Partial<NewTaskRow>, opts: TransitionOptions): TaskRow | undefined {
  return db.transaction((tx) => {
    const before = findTask(tx, task.id);
    if (!before || (opts.token && before.claimToken !== opts.token)) return undefined;
    const next: Partial<NewTaskRow> = { ...patch };
    const charged = next.pointsCharged !== undefined ? next.pointsCharged : before.pointsCharged;
    if ((next.phase ?? before.phase) === "done" || (charged !== null && charged !== undefined)) next.pointsReserved = 0;
    const updated = opts.token ? updateLeasedTask(tx, task.id, opts.token, next) : updateTask(tx, task.id, next);
    if (!updated) return undefined;
    settleCredits(tx, before, updated, opts.now);
    if (updated.status === before.status) return updated;
    const type = eventTypeFor(updated.status);
    const subscribed: string[] = JSON.parse(updated.callbackEvents) as string[];
    if (!type || !subscribed.includes(type)) return updated;

    const sequence = updated.eventSequence + 1;
    const withSeq = updateTask(tx, updated.id, { eventSequence: sequence })!;
    const body = {
      type,
      timestamp: new Date(opts.now).toISOString(),
      data: { ...flatTask(withSeq), sequence, previous_status: before.status },
    };
    insertEvent(tx, {
      id: newId("evt", opts.now),
      clientId: withSeq.clientId,
      clientSeq: nextClientEventSeq(tx, withSeq.clientId),
      taskId: withSeq.id,
      type,
      sequence,
      payload: JSON.stringify(body),
      callbackUrl: withSeq.callbackUrl,
      destinationHost: withSeq.callbackUrl ? destinationHost(withSeq.callbackUrl) : "",
      deliveryStatus: withSeq.callbackUrl ? "pending" : "none",
      nextAttemptAt: withSeq.callbackUrl ? opts.now + (opts.firstAttemptDelayMs ?? 0) : null,
      createdAt: opts.now,
    });
    return withSeq;
  });
}

function settleCredits(tx: DbOrTx, before: TaskRow, after: TaskRow, now: number): void {
  applyCreditChange(
    tx,
    after.clientId,
    after.id,
    {
      charged: (after.pointsCharged ?? 0) - (before.pointsCharged ?? 0),
      refunded: (after.pointsRefunded ?? 0) - (before.pointsRefunded ?? 0),
      reserved: after.pointsReserved - before.pointsReserved,
    },
    now,
  );
  // Room came back (or a charge turned out lower than held): tasks that waited for it may go now.
  if (after.pointsReserved < before.pointsReserved) wakeWaitingOfClient(tx, after.clientId, now);
  if (after.priceKey && after.pointsCharged !== null && after.pointsCharged > 0 && after.pointsCharged !== before.pointsCharged) {
    learnPrice(tx, after.priceKey, after.pointsCharged, now);
  }
}

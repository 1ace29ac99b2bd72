import { lastEventsOfTasks } from "../db/events.js";
import { findClientTask, findTask, listClientTasks, waitingAhead, type TaskRow } from "../db/tasks.js";
import type { TaskStatus } from "../db/schema.js";
import type { Db } from "../db/open.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { deliverySummary, flatTask, taskView, type FlatTask, type TaskView } from "./task-view.js";
import type { Lifecycle } from "../core/lifecycle.js";

function notFound(): ApiError {
  return new ApiError("task_not_found", "No task with this id belongs to your API key.");
}

/** 1-based place among the account's waiting tasks, for a task still waiting in the relay. */
function queuePosition(db: Db, task: TaskRow): number | null {
  if (task.phase !== "waiting") return null;
  return waitingAhead(db, task.upstreamAccount, task.id) + 1;
}

export function requireClientTask(db: Db, clientId: string, id: string): TaskRow {
  const task = findClientTask(db, clientId, id);
  if (!task) throw notFound();
  return task;
}

export function getTaskView(db: Db, clientId: string, id: string): TaskView {
  return viewOf(db, requireClientTask(db, clientId, id));
}

/** A task's view; `withQueuePosition: false` skips the position count (a new task is simply last). */
export function viewOf(db: Db, task: TaskRow, opts: { withQueuePosition?: boolean } = {}): TaskView {
  // A task without events (eventSequence 0), e.g. one just created, needs no event lookup.
  const last = task.eventSequence === 0 ? undefined : lastEventsOfTasks(db, [task.id]).get(task.id);
  return taskView(task, deliverySummary(task, last), opts.withQueuePosition === false ? null : queuePosition(db, task));
}

const encodeCursor = (id: string) => Buffer.from(JSON.stringify({ b: id })).toString("base64url");
function decodeCursor(cursor: string): string {
  try {
    const parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as { b?: unknown };
    if (typeof parsed.b === "string" && parsed.b.length < 100) return parsed.b;
  } catch {
    // fall through
  }
  throw new ApiError("invalid_request", "cursor is not one this API returned.", [{ field: "cursor", message: "unrecognised cursor" }]);
}

export function listTaskViews(
  db: Db,
  clientId: string,
  q: { limit: number; cursor?: string | undefined; type?: "image" | "video" | undefined; status?: TaskStatus | undefined },
): { data: FlatTask[]; next_cursor: string | null } {
  const beforeId = q.cursor ? decodeCursor(q.cursor) : undefined;
  // One extra row tells whether another page exists without a count query.
  const rows = listClientTasks(db, { clientId, limit: q.limit + 1, beforeId, type: q.type, status: q.status });
  const page = rows.slice(0, q.limit);
  const last = lastEventsOfTasks(
    db,
    page.map((t) => t.id),
  );
  return {
    data: page.map((t) => flatTask(t, deliverySummary(t, last.get(t.id)))),
    next_cursor: rows.length > q.limit ? encodeCursor(page[page.length - 1]!.id) : null,
  };
}

/**
 * Cancels a task that has never been offered to the upstream. Once a submission was attempted,
 * the upstream may have created (and charged) it, and it has no cancel: 409 cannot_cancel.
 * `clientId` null: an operator's cancel (the CLI), any client's task.
 */
export function cancelWaitingTask(deps: { db: Db; clock: { now(): number }; lifecycle: Lifecycle }, clientId: string | null, id: string): TaskRow {
  const { db, clock, lifecycle } = deps;
  const now = clock.now();
  return db.transaction((tx) => {
    const task = clientId === null ? findTask(tx, id) : findClientTask(tx, clientId, id);
    if (!task) throw notFound();
    if (task.status === "canceled") return task;
    const leased = task.claimedUntil !== null && task.claimedUntil >= now;
    if (task.phase !== "waiting" || task.submitAttempts > 0 || leased) {
      throw new ApiError(
        "cannot_cancel",
        task.phase === "done"
          ? `The task has already ended (${task.status}).`
          : "The task was already submitted upstream, which offers no cancel; it will run to its end.",
      );
    }
    return lifecycle.cancel(task, null, null, tx)!;
  });
}

export function cancelTask(deps: ServiceDeps, clientId: string, id: string): TaskView {
  return viewOf(deps.db, cancelWaitingTask(deps, clientId, id));
}

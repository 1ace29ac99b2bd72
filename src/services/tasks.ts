import type { TaskStatus } from "../statuses.js";
import type { TaskRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { deliverySummary, flatTask, taskView, type FlatTask, type TaskView } from "../core/task-view.js";
import { fitTaskData, WEBHOOK_BODY_MAX_BYTES } from "../core/body-limit.js";
import { estimateCompletion, medianDuration } from "../core/eta.js";
import { accountCapacity } from "../core/submit-plan.js";

type Deps = Pick<ServiceDeps, "store" | "clock" | "config">;

function notFound(): ApiError {
  return new ApiError("task_not_found", "No task with this id belongs to your API key.");
}

/** 1-based place among the account's waiting tasks, for a task still waiting in the relay. */
async function queuePositionOf(deps: Deps, task: TaskRow): Promise<number | null> {
  if (task.phase !== "waiting") return null;
  return (await deps.store.tasks.waitingAhead(task.upstreamAccount, task.id)) + 1;
}

/** Median durations of the models of `tasks` not yet ended, one stored read per (type, model). */
async function mediansOf(deps: Deps, tasks: TaskRow[]): Promise<Map<string, number | null>> {
  const medians = new Map<string, number | null>();
  for (const t of tasks) {
    const key = `${t.type}\u0000${t.model}`;
    if (t.phase === "done" || medians.has(key)) continue;
    medians.set(key, medianDuration(await deps.store.accounts.durationSamples(t.type, t.model)));
  }
  return medians;
}
const medianKey = (t: TaskRow) => `${t.type}\u0000${t.model}`;

/**
 * A task's estimated end (core/eta.ts): running tasks from the model's median; waiting ones also
 * from their place in the account's queue (`ahead`; null: not counted, no estimate).
 */
async function estimateOf(
  deps: Deps,
  task: TaskRow,
  ahead: number | null,
  medians?: Map<string, number | null>,
): Promise<number | null> {
  // Without its place in the queue a waiting task has no estimate (core/eta.ts): nothing to read.
  // Every creation answers through here, so this spares intake two stored reads.
  if (task.phase === "done" || (task.phase === "waiting" && ahead === null)) return null;
  const medianMs = (medians ?? (await mediansOf(deps, [task]))).get(medianKey(task)) ?? null;
  if (medianMs === null) return null;
  const now = deps.clock.now();
  const capacity =
    task.phase === "waiting"
      ? accountCapacity(deps.config.upstreamMaxConcurrent, await deps.store.accounts.state(task.upstreamAccount), now)
      : Number.POSITIVE_INFINITY;
  return estimateCompletion({ phase: task.phase, submittedAt: task.submittedAt, now, medianMs, ahead, capacity });
}

/** A task's place in its account's queue (1-based, waiting tasks only) and its estimated end (a stream's task.progress). */
export async function progressOf(
  deps: Deps,
  task: TaskRow,
): Promise<{ queuePosition: number | null; estimatedCompletionAt: number | null }> {
  const queuePosition = await queuePositionOf(deps, task);
  const estimatedCompletionAt = await estimateOf(deps, task, queuePosition === null ? null : queuePosition - 1);
  return { queuePosition, estimatedCompletionAt };
}

export async function requireClientTask(
  deps: Pick<ServiceDeps, "store">,
  clientId: string,
  id: string,
): Promise<TaskRow> {
  const task = await deps.store.tasks.findOfClient(clientId, id);
  if (!task) throw notFound();
  return task;
}

export async function getTaskView(deps: Deps, clientId: string, id: string): Promise<TaskView> {
  return viewOf(deps, await requireClientTask(deps, clientId, id));
}

/**
 * A task's view. `withQueuePosition: false` (a creation's answer) counts the position only when
 * the model's median is known, so the 201 carries the same estimate a read a moment later does
 * (#39), and a model without one costs intake one read, not three.
 */
export async function viewOf(deps: Deps, task: TaskRow, opts: { withQueuePosition?: boolean } = {}): Promise<TaskView> {
  // A task without events (eventSequence 0), e.g. one just created, needs no event lookup.
  const last = task.eventSequence === 0 ? undefined : await deps.store.events.lastOfTask(task.id);
  // A creation's answer reads its model's median once, for both the question and the estimate.
  const medians =
    opts.withQueuePosition === false && task.phase === "waiting" ? await mediansOf(deps, [task]) : undefined;
  const counted = opts.withQueuePosition !== false || medians?.get(medianKey(task)) != null;
  const position = counted ? await queuePositionOf(deps, task) : null;
  const eta = await estimateOf(deps, task, position === null ? null : position - 1, medians);
  return taskView(task, (ref) => deps.store.outputs.bytes(ref), deliverySummary(task, last), position, eta);
}

/** A list item is held to a webhook body's size: a page of 100 builds at most 25 MiB, whatever the outputs. */
export const LIST_ITEM_MAX_BYTES = WEBHOOK_BODY_MAX_BYTES;

const encodeCursor = (id: string) => Buffer.from(JSON.stringify({ b: id })).toString("base64url");
function decodeCursor(cursor: string): string {
  try {
    const parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as { b?: unknown };
    if (typeof parsed.b === "string" && parsed.b.length < 100) return parsed.b;
  } catch {
    // fall through
  }
  throw new ApiError("invalid_request", "cursor is not one this API returned.", [
    { field: "cursor", message: "unrecognised cursor" },
  ]);
}

/**
 * The queue places of a page's waiting items whose model has a known median, per upstream account:
 * one waitingAheadOfEach and one account read per account on the page, whatever the number of items.
 */
async function queuesOf(
  deps: Deps,
  page: TaskRow[],
  medians: Map<string, number | null>,
  now: number,
): Promise<Map<string, { ahead: Map<string, number>; capacity: number }>> {
  const idsByAccount = new Map<string, string[]>();
  for (const t of page) {
    if (t.phase !== "waiting" || (medians.get(medianKey(t)) ?? null) === null) continue;
    const ids = idsByAccount.get(t.upstreamAccount) ?? [];
    ids.push(t.id);
    idsByAccount.set(t.upstreamAccount, ids);
  }
  const queues = new Map<string, { ahead: Map<string, number>; capacity: number }>();
  for (const [account, ids] of idsByAccount) {
    const ahead = await deps.store.tasks.waitingAheadOfEach(account, ids);
    const capacity = accountCapacity(deps.config.upstreamMaxConcurrent, await deps.store.accounts.state(account), now);
    queues.set(account, { ahead, capacity });
  }
  return queues;
}

export async function listTaskViews(
  deps: Deps,
  clientId: string,
  q: {
    limit: number;
    cursor?: string | undefined;
    type?: "image" | "video" | undefined;
    status?: TaskStatus | undefined;
  },
): Promise<{ data: FlatTask[]; next_cursor: string | null }> {
  const beforeId = q.cursor ? decodeCursor(q.cursor) : undefined;
  // One extra row tells whether another page exists without a count query. Each item is held to a
  // webhook body's size by the same rule (core/body-limit.ts): an output that cannot fit is never
  // read from the database, the rest is cut with the webhook's flags. A page is at most limit × that.
  const rows = await deps.store.tasks.list({
    clientId,
    limit: q.limit + 1,
    beforeId,
    type: q.type,
    status: q.status,
    outputMaxBytes: LIST_ITEM_MAX_BYTES,
  });
  const page = rows.slice(0, q.limit);
  const last = await deps.store.events.lastOfTasks(page.map((t) => t.id));
  // Estimates from the medians loaded once per page (one read per model on it) and, for waiting items,
  // their places in their accounts' queues: one grouped position query per account on the page.
  const medians = await mediansOf(deps, page);
  const now = deps.clock.now();
  const queues = await queuesOf(deps, page, medians, now);
  return {
    data: page.map((t) => {
      const queue = t.phase === "waiting" ? queues.get(t.upstreamAccount) : undefined;
      const estimatedCompletionAt = estimateCompletion({
        phase: t.phase,
        submittedAt: t.submittedAt,
        now,
        medianMs: medians.get(medianKey(t)) ?? null,
        ahead: queue?.ahead.get(t.id) ?? null,
        capacity: queue?.capacity ?? Number.POSITIVE_INFINITY,
      });
      const flat = flatTask(t, deliverySummary(t, last.get(t.id)), {
        maxOutputBytes: LIST_ITEM_MAX_BYTES,
        estimatedCompletionAt,
      });
      return fitTaskData(
        t.outputOmitted ? { ...flat, output: null, output_omitted: true as const } : flat,
        LIST_ITEM_MAX_BYTES,
      ).data;
    }),
    next_cursor: rows.length > q.limit ? encodeCursor(page[page.length - 1]!.id) : null,
  };
}

/**
 * Why the task cannot be canceled now, or null when it can: only a task never offered to the
 * upstream can (once a submission was attempted, the upstream may have created and charged it,
 * and it has no cancel). A task a submitter holds right now is on its way upstream.
 */
export function cancelRefusal(task: TaskRow, now: number): string | null {
  const leased = task.claimedUntil !== null && task.claimedUntil >= now;
  if (task.phase === "done") return `The task has already ended (${task.status}).`;
  if (task.phase !== "waiting" || task.submitAttempts > 0 || leased)
    return "The task was already submitted upstream, which offers no cancel; it will run to its end.";
  return null;
}

/**
 * Cancels a task that has never been offered to the upstream (cancelRefusal); otherwise 409
 * cannot_cancel. `clientId` null: an operator's cancel (the CLI), any client's task.
 */
export async function cancelWaitingTask(
  deps: Pick<ServiceDeps, "lifecycle">,
  clientId: string | null,
  id: string,
): Promise<TaskRow> {
  const task = await deps.lifecycle.cancelIf(id, clientId, (task, now) => {
    if (task.status === "canceled") return false;
    const refusal = cancelRefusal(task, now);
    if (refusal !== null) throw new ApiError("cannot_cancel", refusal);
    return true;
  });
  if (!task) throw notFound();
  return task;
}

export async function cancelTask(deps: ServiceDeps, clientId: string, id: string): Promise<TaskView> {
  return viewOf(deps, await cancelWaitingTask(deps, clientId, id));
}

import type { EventRow, TaskRow } from "../store/rows.js";
import type { TaskStatus } from "../statuses.js";
import type { FileRecord } from "../mirror/copy.js";
import { JsonText, PiecedJsonText } from "../upstream/json-text.js";

export interface DeliverySummary {
  status: "none" | "pending" | "succeeded" | "failed";
  attempts: number;
  last_attempt_at: string | null;
  last_status_code: number | null;
}

export interface TaskData {
  id: string;
  type: "image" | "video";
  status: TaskStatus;
  model: string;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  upstream_task_id: string | null;
  /** `message_truncated`: the message was cut (stored cut when longer than STORED_ERROR_MESSAGE_BYTES, or cut to fit a body). */
  error: { code: string; message: string; request_id: string | null; message_truncated?: true } | null;
  metadata: Record<string, string> | null;
  callback: { url: string | null; events: string[]; delivery?: DeliverySummary };
  queue_position?: number;
  /** When the task should end (core/eta.ts), ISO-8601; null when unknown and once ended. */
  estimated_completion_at: string | null;
  /** Copies of the output's files in the client's bucket (docs/contract.md, "Outputs"), once made. */
  files?: FileRecord[];
  /** Some files were left out (from the end) to keep a body within its size; the task read has them all. */
  files_truncated?: true;
}

export interface TaskUsage {
  points_charged: number | null;
  points_refunded: number | null;
}

/** `GET /tasks/{id}`: `{data, output, usage}`. */
export interface TaskView {
  data: TaskData;
  output: unknown;
  usage: TaskUsage;
}

/** List items and webhook `data`: the view flattened; `output_omitted` when the output was left out to keep the body within its size. */
export type FlatTask = TaskData & { output: unknown; usage: TaskUsage; output_omitted?: true };

export const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

function parseJson<T>(text: string | null): T | null {
  if (text === null) return null;
  try {
    return JSON.parse(text) as T;
  } catch {
    return null;
  }
}

export function deliverySummary(task: TaskRow, lastEvent: EventRow | undefined): DeliverySummary {
  if (!lastEvent || !task.callbackUrl)
    return { status: "none", attempts: 0, last_attempt_at: null, last_status_code: null };
  return {
    // The task's own callback row (an endpoint's row alone can be `ended`).
    status: lastEvent.deliveryStatus === "ended" ? "failed" : lastEvent.deliveryStatus,
    attempts: lastEvent.attempts,
    last_attempt_at: iso(lastEvent.lastAttemptAt),
    last_status_code: lastEvent.lastStatusCode,
  };
}

/**
 * The task row's fields a view reads: what `flatTask` needs, so a row built by hand (the test
 * webhook's sample, services/sample-events.ts) is checked by the compiler for each of them.
 */
export type TaskViewRow = Pick<
  TaskRow,
  | "id"
  | "type"
  | "model"
  | "status"
  | "phase"
  | "createdAt"
  | "updatedAt"
  | "completedAt"
  | "upstreamTaskId"
  | "errorJson"
  | "metadataJson"
  | "callbackUrl"
  | "callbackEvents"
  | "outputJson"
  | "outputRef"
  | "pointsCharged"
  | "pointsRefunded"
  | "filesJson"
>;

export function taskData(
  task: TaskViewRow,
  delivery?: DeliverySummary,
  queuePosition?: number | null,
  estimatedCompletionAt: number | null = null,
): TaskData {
  const data: TaskData = {
    id: task.id,
    type: task.type,
    status: task.status,
    model: task.model,
    created_at: iso(task.createdAt)!,
    updated_at: iso(task.updatedAt)!,
    completed_at: iso(task.completedAt),
    upstream_task_id: task.upstreamTaskId,
    error: parseJson(task.errorJson),
    metadata: parseJson(task.metadataJson),
    callback: { url: task.callbackUrl, events: parseJson<string[]>(task.callbackEvents) ?? [] },
    estimated_completion_at: task.phase === "done" ? null : iso(estimatedCompletionAt),
  };
  if (delivery) data.callback.delivery = delivery;
  if (queuePosition !== undefined && queuePosition !== null) data.queue_position = queuePosition;
  // While the copies are being made the column holds their progress (an object), not the list.
  const files = parseJson<unknown>(task.filesJson);
  if (Array.isArray(files)) data.files = files as FileRecord[];
  return data;
}

export function taskUsage(task: TaskViewRow): TaskUsage {
  return { points_charged: task.pointsCharged, points_refunded: task.pointsRefunded };
}

/** How a view reads an output kept in pieces outside the row: as UTF-8 bytes (OutputStore.bytes, core/stored-output.ts). */
export type OutputPieces = (ref: string) => AsyncIterable<Uint8Array>;

/**
 * The stored output as its text, never parsed here (issue #38 item 7): answers and webhook bodies
 * splice it in as stored (stringifyWithText), so a 7 MB output costs a copy, not a parse and a
 * stringify on the event loop, and the bytes sent are the bytes stored. An output kept in pieces
 * is streamed from them into the answer (http/json-answer.ts).
 */
export function taskOutput(task: TaskRow, pieces: OutputPieces): JsonText | PiecedJsonText | null {
  if (task.outputJson !== null) return new JsonText(task.outputJson);
  const ref = task.outputRef;
  return ref === null ? null : new PiecedJsonText(() => pieces(ref));
}

export function taskView(
  task: TaskRow,
  pieces: OutputPieces,
  delivery?: DeliverySummary,
  queuePosition?: number | null,
  estimatedCompletionAt: number | null = null,
): TaskView {
  return {
    data: taskData(task, delivery, queuePosition, estimatedCompletionAt),
    output: taskOutput(task, pieces),
    usage: taskUsage(task),
  };
}

/**
 * The task flattened. `maxOutputBytes`: an output whose JSON is surely longer (more UTF-16 units
 * than that many bytes) is not parsed at all, and comes out as `output: null, output_omitted: true`,
 * as fitTaskData would leave it (core/body-limit.ts): a body held to that size never builds it.
 * `estimatedCompletionAt`: the task's estimate (core/eta.ts), or null when not known.
 */
export function flatTask(
  task: TaskViewRow,
  delivery?: DeliverySummary,
  opts: { maxOutputBytes?: number; estimatedCompletionAt?: number | null } = {},
): FlatTask {
  const data = taskData(task, delivery, undefined, opts.estimatedCompletionAt ?? null);
  // An output kept in pieces is longer than any body this builds (OUTPUT_ROW_MAX_CHARS): never read for one.
  const tooLong =
    task.outputRef !== null ||
    (opts.maxOutputBytes !== undefined && task.outputJson !== null && task.outputJson.length > opts.maxOutputBytes);
  if (tooLong) return { ...data, output: null, usage: taskUsage(task), output_omitted: true };
  return { ...data, output: task.outputJson === null ? null : new JsonText(task.outputJson), usage: taskUsage(task) };
}

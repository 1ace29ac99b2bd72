/**
 * A simulated upstream task and how it looks on the wire. Progression is lazy:
 * the status is a function of the clock and three instants fixed at creation,
 * so a FakeClock drives it and no timer can leak out of a test.
 */
import type { GenerationRequest } from "./validation.js";

export const TASK_STATUSES = ["queued", "processing", "succeeded", "failed", "canceled"] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export type TaskType = "image" | "video";

export interface SimTask {
  id: string;
  /** Position in the owner's task list; list order and cursors use it. */
  seq: number;
  apiKey: string;
  type: TaskType;
  model: string;
  idempotencyKey: string;
  price: number;
  refunded: number;
  createdAt: number;
  processingAt: number;
  completedAt: number;
  outcome: "succeeded" | "failed";
  /** Failed by the simulator's failure rate (SimulatorVariation), not by the fail marker. */
  failedByChance?: boolean;
  /** True once the terminal state was observed and its refund applied; from then on the task never changes. */
  settled: boolean;
  output: object;
}

/** Substring of the prompt that makes a task end failed: the way tests and the demo ask for a failure. */
export const FAIL_MARKER = "sim:fail";

export interface Schedule {
  queuedMs: number;
  processingMs: number;
}

/**
 * Instants of a task created at `createdAt`. Queued lasts at least 1 ms so the
 * creation response shows `queued` (as the reference promises) even with zero timings.
 */
export function schedule(createdAt: number, s: Schedule): { processingAt: number; completedAt: number } {
  const processingAt = createdAt + Math.max(1, s.queuedMs);
  return { processingAt, completedAt: processingAt + Math.max(0, s.processingMs) };
}

export function statusAt(task: SimTask, now: number): TaskStatus {
  if (task.settled) return task.outcome;
  if (now < task.processingAt) return "queued";
  if (now < task.completedAt) return "processing";
  return task.outcome;
}

export function isTerminal(status: TaskStatus): boolean {
  return status === "succeeded" || status === "failed" || status === "canceled";
}

const SIZE_PIXELS: Record<string, number> = { "1K": 1024, "2K": 2048, "4K": 4096 };

/** Long side from the size, short side from the aspect ratio; square when no ratio is given. */
function imageDimensions(size: string, aspectRatio: string | null): { width: number; height: number } {
  const long = SIZE_PIXELS[size] ?? 1024;
  const m = aspectRatio ? /^(\d+):(\d+)$/u.exec(aspectRatio) : null;
  const w = Number(m?.[1] ?? 1);
  const h = Number(m?.[2] ?? 1);
  if (!w || !h || w === h) return { width: long, height: long };
  return w > h
    ? { width: long, height: Math.round((long * h) / w) }
    : { width: Math.round((long * w) / h), height: long };
}

export function buildOutput(id: string, req: GenerationRequest, publicBaseUrl: string): object {
  if (req.type === "image") {
    const { width, height } = imageDimensions(req.size, req.aspectRatio);
    return { images: [{ url: `${publicBaseUrl}/files/${id}-0.png`, width, height }] };
  }
  return { video: { url: `${publicBaseUrl}/files/${id}.mp4`, duration: req.duration } };
}

const iso = (ms: number) => new Date(ms).toISOString();

function updatedAt(task: SimTask, status: TaskStatus): number {
  if (status === "queued") return task.createdAt;
  if (status === "processing") return task.processingAt;
  return task.completedAt;
}

/** The fields shared by a task read's `data` and a list item. */
function coreFields(task: SimTask, status: TaskStatus): Record<string, unknown> {
  return {
    id: task.id,
    status,
    type: task.type,
    model: task.model,
    created_at: iso(task.createdAt),
    updated_at: iso(updatedAt(task, status)),
    completed_at: isTerminal(status) ? iso(task.completedAt) : null,
  };
}

function failure(task: SimTask, status: TaskStatus): object | undefined {
  if (status !== "failed") return undefined;
  const why = task.failedByChance ? "the simulator's failure rate" : `the prompt contains "${FAIL_MARKER}"`;
  return { code: "generation_failed", message: `Generation failed (simulated: ${why})` };
}

function usage(task: SimTask): object {
  return { points_charged: task.price, points_refunded: task.refunded };
}

/** Body of GET /tasks/{id} and of the creation responses. */
export function renderTask(task: SimTask, now: number): object {
  const status = statusAt(task, now);
  const data = coreFields(task, status);
  const error = failure(task, status);
  if (error) data.error = error;
  const body: Record<string, unknown> = { data };
  if (status === "succeeded") body.output = task.output;
  body.usage = usage(task);
  return body;
}

/** One element of GET /tasks: the read body flattened into a single object. */
export function renderListItem(task: SimTask, now: number): object {
  const status = statusAt(task, now);
  const item = coreFields(task, status);
  if (status === "succeeded") item.output = task.output;
  item.usage = usage(task);
  const error = failure(task, status);
  if (error) item.error = error;
  return item;
}

import type { TaskPhase } from "../statuses.js";

/** Fewer finished tasks than this and a model's duration is unknown (as DurationStats.expected). */
export const ETA_MIN_SAMPLES = 3;

/** Median of a model's recent durations (ms), the way DurationStats reads it; null below ETA_MIN_SAMPLES. */
export function medianDuration(samples: readonly number[]): number | null {
  if (samples.length < ETA_MIN_SAMPLES) return null;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(0.5 * sorted.length))]!;
}

export interface EtaInput {
  phase: TaskPhase;
  /** When the task went upstream (null while waiting). */
  submittedAt: number | null;
  now: number;
  /** The model's median duration from submission to end (ms), or null while unknown. */
  medianMs: number | null;
  /** Waiting tasks of the same upstream account ahead of this one, or null when not counted. */
  ahead: number | null;
  /** The account's concurrency cap (Infinity: none). */
  capacity: number;
}

/**
 * When a task should end (epoch ms), or null: ended tasks, unknown model durations, and waiting
 * tasks whose queue position was not counted. Never earlier than `now`.
 * - running (submitted, or its output being copied): submitted_at + median, or now when overdue;
 * - waiting: now + (ahead / capacity + 1) × median — the tasks ahead drain `capacity` at a time.
 */
export function estimateCompletion(t: EtaInput): number | null {
  if (t.phase === "done" || t.medianMs === null || !Number.isFinite(t.medianMs)) return null;
  const median = Math.max(0, t.medianMs);
  if (t.phase === "waiting") {
    if (t.ahead === null) return null;
    const capacity = t.capacity > 0 ? t.capacity : 1;
    const waves = Number.isFinite(capacity) ? Math.max(0, t.ahead) / capacity : 0;
    return Math.round(t.now + (waves + 1) * median);
  }
  const start = t.submittedAt ?? t.now;
  return Math.max(t.now, Math.round(start + median));
}

/**
 * When to read a task again. The upstream charges reads against a small per-minute budget, so
 * reads are spaced by the task's age: soon after submission (images often finish in seconds),
 * then further apart as it runs long. When a model's typical duration is known, the next read is
 * aimed at the moment the task is expected to finish.
 */
const FIRST_POLL_MS = { image: 2_000, video: 8_000 } as const;
const MIN_GAP_MS = { image: 1_000, video: 3_000 } as const;
const MAX_GAP_MS = 60_000;

export function firstPollDelay(type: "image" | "video"): number {
  return FIRST_POLL_MS[type];
}

/**
 * @param ageMs time since submission
 * @param expectedMs learned typical duration for the type and model, or null
 */
export function nextPollDelay(type: "image" | "video", ageMs: number, expectedMs: number | null): number {
  const min = MIN_GAP_MS[type];
  if (expectedMs !== null && ageMs < expectedMs) {
    // Aim the next read at the expected end (at most a minute ahead).
    return Math.max(min, Math.min(expectedMs - ageMs, MAX_GAP_MS));
  }
  const overdue = expectedMs !== null ? ageMs - expectedMs : ageMs;
  return Math.max(min, Math.min(MAX_GAP_MS, Math.round(overdue * 0.25)));
}

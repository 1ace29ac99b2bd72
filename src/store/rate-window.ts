import type { RateLimitVerdict } from "./store.js";

/**
 * A sliding window's verdict from the times counted in it (oldest first, all within the window):
 * room for one more, or the time enough of them leave the window for one more to fit. Both drivers
 * decide with it, on what they read under their lock; the dashboard's sign-in limiter too.
 */
export function slidingVerdict(counted: number[], limit: number, windowMs: number, now: number): RateLimitVerdict {
  if (counted.length < limit) return { allowed: true };
  // One more fits once all but limit - 1 of them have left: the (length - limit)th leaves last of those.
  const leaving = counted[Math.max(0, counted.length - Math.max(1, limit))] ?? now;
  return { allowed: false, retryAt: leaving + windowMs };
}

/**
 * The one back-off of the house (as Svix keeps one retry.rs): a delay that doubles per attempt from
 * `baseMs` and stops at `maxMs`, optionally spread by ±`jitter` so that parties that failed together
 * do not come back in lockstep. Every doubling wait (worker ticks, submissions, polls, saturated keys,
 * breaker cool-downs) is this function with its own numbers; a stateful doubling (a cool-down kept
 * between failures) is attempt 1 from the current value. Pure: the caller passes `random`.
 */

export interface BackoffInput {
  /** 0-based: attempt 0 waits `baseMs`, each further attempt twice the one before. */
  attempt: number;
  baseMs: number;
  maxMs: number;
  /** Fraction of the delay the result may move either way (0.2 = ±20%); 0 or absent: none. */
  jitter?: number;
  random?: () => number;
}

/** Past 2^1023 a float is Infinity; the cap has long been reached by then. */
const MAX_EXPONENT = 1023;

export function cappedBackoff({ attempt, baseMs, maxMs, jitter = 0, random = Math.random }: BackoffInput): number {
  const doubled = baseMs * 2 ** Math.min(Math.max(0, attempt), MAX_EXPONENT);
  const capped = Math.min(maxMs, doubled);
  return jitter > 0 ? Math.min(maxMs, jittered(capped, jitter, random)) : capped;
}

/**
 * `delayMs` moved by up to ±`fraction` of itself, rounded to a whole millisecond and kept inside
 * the band (rounding alone could step just outside it for small delays). 0 stays 0.
 */
export function jittered(delayMs: number, fraction: number, random: () => number = Math.random): number {
  if (!(delayMs > 0)) return 0;
  const factor = 1 + (random() * 2 - 1) * fraction;
  const low = Math.ceil(delayMs * (1 - fraction));
  const high = Math.floor(delayMs * (1 + fraction));
  return Math.min(high, Math.max(low, Math.round(delayMs * factor)));
}

import { jittered } from "../core/backoff.js";

/** Receivers may push a retry back by at most one hour (docs/contract.md, "Retries"). */
export const MAX_RETRY_AFTER_MS = 3_600_000;
const JITTER = 0.2;

/**
 * Delay before attempt `attemptIndex` (0-based) of a delivery round, with ±20%
 * jitter so that receivers that failed together are not retried in lockstep.
 * A 0 delay stays 0 (the first attempt goes out at once). Null once the
 * schedule is exhausted.
 */
export function retryDelayMs(
  scheduleMs: number[],
  attemptIndex: number,
  random: () => number = Math.random,
): number | null {
  if (!Number.isInteger(attemptIndex) || attemptIndex < 0) {
    throw new RangeError(`attemptIndex must be a non-negative integer, got ${attemptIndex}`);
  }
  const base = scheduleMs[attemptIndex];
  if (base === undefined) return null;
  return jittered(base, JITTER, random);
}

const IMF_FIXDATE = /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const RFC850_DATE = /^[A-Za-z]{6,9}, \d{2}-[A-Za-z]{3}-\d{2} \d{2}:\d{2}:\d{2} GMT$/;
const ASCTIME_DATE = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/;

/**
 * `Retry-After` (RFC 9110 §10.2.3) as milliseconds from `nowMs`: delta-seconds
 * or an HTTP-date, capped at one hour. Null when absent or malformed (a
 * negative or fractional number is malformed). A date already past means
 * "now": 0.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs: number): number | null {
  if (value == null) return null;
  const text = value.trim();
  if (text === "") return null;
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS);
  // Date.parse alone is far too lenient ("1" is a date to V8), so only the three HTTP-date forms are tried.
  let dateMs: number;
  if (IMF_FIXDATE.test(text) || RFC850_DATE.test(text)) dateMs = Date.parse(text);
  else if (ASCTIME_DATE.test(text))
    dateMs = Date.parse(`${text} GMT`); // asctime carries no zone but is GMT
  else return null;
  if (Number.isNaN(dateMs)) return null;
  return Math.min(Math.max(0, dateMs - nowMs), MAX_RETRY_AFTER_MS);
}

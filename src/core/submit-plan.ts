/**
 * What the submitter decides, as pure functions: whether an account may take submissions now and
 * how many, and how an upstream's refusal turns into the task's next step. No I/O, no store and no
 * clock: the submitter reads the facts, calls these, and applies the answer (src/workers/submitter.ts).
 * Whether the task's credits allow it is core/credits.ts (decideSubmission).
 */
import { cappedBackoff } from "./backoff.js";

/** After this long failing to reach the upstream, a task ends failed instead of retrying forever. */
export const GIVE_UP_AFTER_MS = 24 * 60 * 60 * 1000;
/** A learned concurrency limit is re-probed after this long (other apps on the account may have finished). */
export const LEARNED_LIMIT_TTL_MS = 10 * 60 * 1000;
/** A task blocked by concurrency is looked at again at least this often, even without a nudge. */
export const BLOCKED_RECHECK_MS = 30_000;
/** How long 409 "still being created" answers to a task's own key are retried before its fate is called unknown. */
export const CONFLICT_WINDOW_MS = 30 * 60_000;
export const CONFLICT_MIN_DELAY_MS = 5_000;
export const CONFLICT_MAX_DELAY_MS = 2 * 60_000;
/** What a 429 rate_limit without Retry-After pauses the account for. */
export const RATE_LIMIT_PAUSE_MS = 5_000;

export function submitBackoffMs(attempt: number): number {
  return cappedBackoff({ attempt: attempt - 1, baseMs: 1_000, maxMs: 5 * 60_000 });
}

/** What the plan reads of an account's stored state. */
export interface AccountFacts {
  submitPausedUntil?: number | null;
  learnedMaxConcurrent?: number | null;
  learnedAt?: number | null;
}

/**
 * Concurrency cap of an account now: the configured cap (none: unbounded), lowered by what a recent
 * 429 concurrent_limit taught (other apps may share the account).
 */
export function accountCapacity(configured: number | null | undefined, state: AccountFacts | undefined, now: number) {
  const cap = configured ?? Number.POSITIVE_INFINITY;
  if (state?.learnedMaxConcurrent && state.learnedAt && now - state.learnedAt < LEARNED_LIMIT_TTL_MS)
    return Math.min(cap, state.learnedMaxConcurrent);
  return cap;
}

export type Admission =
  /** Paused by a 429 rate_limit: nothing goes before `until`. */
  | { kind: "paused"; until: number }
  /** At its concurrency cap: looked at again at `recheckAt` (or when a task of it ends). */
  | { kind: "full"; recheckAt: number }
  /** Claim at most `limit` tasks of the account now. */
  | { kind: "claim"; limit: number };

/** Whether an account may take submissions this tick, and how many: never more than its cap leaves free. */
export function admission(f: {
  now: number;
  state: AccountFacts | undefined;
  capacity: number;
  running: number;
  batchSize: number;
}): Admission {
  if (f.state?.submitPausedUntil && f.state.submitPausedUntil > f.now)
    return { kind: "paused", until: f.state.submitPausedUntil };
  const limit = Math.min(f.batchSize, Math.max(0, f.capacity - f.running));
  if (limit <= 0) return { kind: "full", recheckAt: f.now + BLOCKED_RECHECK_MS };
  return { kind: "claim", limit };
}

/** Only a task never offered upstream can expire: after an attempt, the upstream may hold (and charge) it. */
export function expiresUnsent(task: { expiresAt: number | null; submitAttempts: number }, now: number): boolean {
  return task.expiresAt !== null && task.expiresAt <= now && task.submitAttempts === 0;
}

/** What the plan reads of a failed creation call: an upstream answer, or null for anything else thrown. */
export interface CreateFailure {
  status: number | null;
  code: string;
  retryable: boolean;
  retryAfterMs?: number | null | undefined;
}

/** What the task's attempt needs to know of it. */
export interface AttemptFacts {
  createdAt: number;
  submitAttempts: number;
  conflictSince: number | null;
}

export type FailurePlan =
  /** 429 concurrent_limit: not a failure. The account is full; the attempt and reservation are undone. */
  | { kind: "concurrent_limit" }
  /** 429 rate_limit: the account pauses until `until`, the task retries then, the attempt undone. */
  | { kind: "rate_limit"; until: number }
  /** 409 on the task's own key: retried at `at` with the same key; `conflictSince` is kept. */
  | { kind: "conflict_retry"; at: number; delay: number; conflictSince: number }
  /** A 2xx the relay cannot use: ends failed, never offered again (it may have been charged). */
  | { kind: "unusable" }
  /** A 4xx refusal (400, 402, 422…): the upstream created and charged nothing; ends failed with its error. */
  | { kind: "refused" }
  /** The upstream may hold the task but never confirmed it: ends upstream_outcome_unknown. */
  | { kind: "unknown"; why: string }
  /** Network failure, timeout, 5xx, 401: tried again at `at` (never in the past). */
  | { kind: "retry"; at: number; delay: number };

/** The next step of a task whose creation call failed. `lastError` names a non-upstream failure in `why`. */
export function failurePlan(
  e: CreateFailure | null,
  task: AttemptFacts,
  now: number,
  lastError = "error",
): FailurePlan {
  if (e?.status === 429 && e.code === "concurrent_limit") return { kind: "concurrent_limit" };
  if (e?.status === 429) return { kind: "rate_limit", until: now + Math.max(0, e.retryAfterMs ?? RATE_LIMIT_PAUSE_MS) };
  if (e?.status === 409) {
    // The upstream is still creating the original from an earlier attempt ("retry later",
    // docs/upstream.md, "Errors"): retried on its own clock, not the network-failure count.
    const since = task.conflictSince ?? now;
    if (now - since < CONFLICT_WINDOW_MS) {
      const delay = Math.max(
        e.retryAfterMs ?? 0,
        Math.min(CONFLICT_MAX_DELAY_MS, Math.max(CONFLICT_MIN_DELAY_MS, (now - since) / 2)),
      );
      return { kind: "conflict_retry", at: now + delay, delay, conflictSince: since };
    }
    return {
      kind: "unknown",
      why: `it kept answering 409 ${e.code} for ${Math.round((now - since) / 60_000)} minutes`,
    };
  }
  if (e && (e.code === "invalid_task_id" || e.code === "response_too_large")) return { kind: "unusable" };
  // 401 means our own key is wrong, not the caller's request: keep retrying, loudly.
  if (e && !e.retryable && e.status !== 401) return { kind: "refused" };
  if (now - task.createdAt > GIVE_UP_AFTER_MS) {
    return {
      kind: "unknown",
      why: `it could not be reached for ${Math.round(GIVE_UP_AFTER_MS / 3_600_000)} hours (last: ${e?.code ?? lastError})`,
    };
  }
  const delay = Math.max(submitBackoffMs(task.submitAttempts), e?.retryAfterMs ?? 0);
  return { kind: "retry", at: now + delay, delay };
}

/**
 * After a 429 concurrent_limit: the account's size as learned (what runs of ours now, at least one),
 * and when the task looks again. When our own tasks fill the account, the end of one nudges the
 * submitter (null: it keeps its place in line); when none of ours runs, nothing will: later.
 */
export function concurrentLimitPlan(running: number, now: number) {
  return {
    learned: { learnedMaxConcurrent: Math.max(1, running), learnedAt: now },
    retryAt: running > 0 ? null : now + BLOCKED_RECHECK_MS,
  };
}

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  accountCapacity,
  admission,
  BLOCKED_RECHECK_MS,
  CONFLICT_MAX_DELAY_MS,
  CONFLICT_MIN_DELAY_MS,
  CONFLICT_WINDOW_MS,
  type CreateFailure,
  concurrentLimitPlan,
  expiresUnsent,
  failurePlan,
  GIVE_UP_AFTER_MS,
  LEARNED_LIMIT_TTL_MS,
  RATE_LIMIT_PAUSE_MS,
  submitBackoffMs,
} from "../../src/core/submit-plan.js";

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const task = { createdAt: NOW - 60_000, submitAttempts: 1, conflictSince: null };
const upstream = (status: number | null, code: string, retryable: boolean, retryAfterMs?: number): CreateFailure => ({
  status,
  code,
  retryable,
  retryAfterMs,
});

describe("accountCapacity", () => {
  it("is the configured cap, unbounded without one", () => {
    expect(accountCapacity(4, undefined, NOW)).toBe(4);
    expect(accountCapacity(null, undefined, NOW)).toBe(Number.POSITIVE_INFINITY);
  });
  it("is lowered by a recent learned limit, and forgets it after the TTL", () => {
    const state = { learnedMaxConcurrent: 2, learnedAt: NOW - 1_000 };
    expect(accountCapacity(4, state, NOW)).toBe(2);
    expect(accountCapacity(null, state, NOW)).toBe(2);
    expect(accountCapacity(1, state, NOW)).toBe(1);
    expect(accountCapacity(4, { learnedMaxConcurrent: 2, learnedAt: NOW - LEARNED_LIMIT_TTL_MS }, NOW)).toBe(4);
  });
});

describe("admission", () => {
  const base = { now: NOW, state: undefined, capacity: 4, running: 1, batchSize: 16 };
  it("claims what the cap leaves free, at most a batch", () => {
    expect(admission(base)).toEqual({ kind: "claim", limit: 3 });
    expect(admission({ ...base, capacity: Number.POSITIVE_INFINITY })).toEqual({ kind: "claim", limit: 16 });
  });
  it("waits while the account is paused", () => {
    expect(admission({ ...base, state: { submitPausedUntil: NOW + 5 } })).toEqual({ kind: "paused", until: NOW + 5 });
    expect(admission({ ...base, state: { submitPausedUntil: NOW } })).toEqual({ kind: "claim", limit: 3 });
  });
  it("is full at (or over) the cap", () => {
    expect(admission({ ...base, running: 4 })).toEqual({ kind: "full", recheckAt: NOW + BLOCKED_RECHECK_MS });
    expect(admission({ ...base, running: 9 })).toEqual({ kind: "full", recheckAt: NOW + BLOCKED_RECHECK_MS });
  });
  it("never submits beyond the account's cap", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 50 }),
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 1, max: 32 }),
        (capacity, running, batchSize) => {
          const plan = admission({ now: NOW, state: undefined, capacity, running, batchSize });
          if (plan.kind === "claim") {
            expect(plan.limit).toBeGreaterThan(0);
            expect(running + plan.limit).toBeLessThanOrEqual(capacity);
            expect(plan.limit).toBeLessThanOrEqual(batchSize);
          } else expect(running).toBeGreaterThanOrEqual(capacity);
        },
      ),
    );
  });
});

describe("expiresUnsent", () => {
  it("expires only a task never offered upstream, once past its deadline", () => {
    expect(expiresUnsent({ expiresAt: NOW, submitAttempts: 0 }, NOW)).toBe(true);
    expect(expiresUnsent({ expiresAt: NOW + 1, submitAttempts: 0 }, NOW)).toBe(false);
    expect(expiresUnsent({ expiresAt: NOW - 1, submitAttempts: 1 }, NOW)).toBe(false);
    expect(expiresUnsent({ expiresAt: null, submitAttempts: 0 }, NOW)).toBe(false);
  });
});

describe("failurePlan", () => {
  it("429 concurrent_limit waits without failing", () => {
    expect(failurePlan(upstream(429, "concurrent_limit", true), task, NOW)).toEqual({ kind: "concurrent_limit" });
  });
  it("429 rate_limit pauses the account for Retry-After, else 5 s", () => {
    expect(failurePlan(upstream(429, "rate_limit", true, 7_000), task, NOW)).toEqual({
      kind: "rate_limit",
      until: NOW + 7_000,
    });
    expect(failurePlan(upstream(429, "whatever", true), task, NOW)).toEqual({
      kind: "rate_limit",
      until: NOW + RATE_LIMIT_PAUSE_MS,
    });
  });
  it("409 retries on its own clock, then calls the outcome unknown", () => {
    expect(failurePlan(upstream(409, "task_in_progress", true), task, NOW)).toEqual({
      kind: "conflict_retry",
      at: NOW + CONFLICT_MIN_DELAY_MS,
      delay: CONFLICT_MIN_DELAY_MS,
      conflictSince: NOW,
    });
    const since = NOW - 20 * 60_000;
    expect(failurePlan(upstream(409, "task_in_progress", true), { ...task, conflictSince: since }, NOW)).toEqual({
      kind: "conflict_retry",
      at: NOW + CONFLICT_MAX_DELAY_MS,
      delay: CONFLICT_MAX_DELAY_MS,
      conflictSince: since,
    });
    const old = { ...task, conflictSince: NOW - CONFLICT_WINDOW_MS };
    expect(failurePlan(upstream(409, "task_in_progress", true), old, NOW)).toEqual({
      kind: "unknown",
      why: "it kept answering 409 task_in_progress for 30 minutes",
    });
  });
  it("an unusable 2xx ends the task, never offered again", () => {
    expect(failurePlan(upstream(200, "invalid_task_id", false), task, NOW)).toEqual({ kind: "unusable" });
    expect(failurePlan(upstream(200, "response_too_large", false), task, NOW)).toEqual({ kind: "unusable" });
  });
  it("402 and 422 are refusals: the task ends failed with the upstream's error", () => {
    expect(failurePlan(upstream(402, "insufficient_points", false), task, NOW)).toEqual({ kind: "refused" });
    expect(failurePlan(upstream(422, "validation_error", false), task, NOW)).toEqual({ kind: "refused" });
  });
  it("5xx, timeouts, 401 and anything thrown retry with backoff", () => {
    expect(failurePlan(upstream(503, "upstream_unavailable", true), task, NOW)).toEqual({
      kind: "retry",
      at: NOW + 1_000,
      delay: 1_000,
    });
    expect(failurePlan(upstream(null, "upstream_timeout", true), { ...task, submitAttempts: 3 }, NOW)).toEqual({
      kind: "retry",
      at: NOW + 4_000,
      delay: 4_000,
    });
    expect(failurePlan(upstream(401, "unauthorized", false), task, NOW)).toMatchObject({ kind: "retry" });
    expect(failurePlan(upstream(503, "upstream_unavailable", true, 60_000), task, NOW)).toMatchObject({
      delay: 60_000,
    });
    expect(failurePlan(null, task, NOW)).toMatchObject({ kind: "retry", delay: 1_000 });
  });
  it("gives up after a day of failing to reach the upstream", () => {
    const old = { ...task, createdAt: NOW - GIVE_UP_AFTER_MS - 1 };
    expect(failurePlan(upstream(503, "upstream_unavailable", true), old, NOW)).toEqual({
      kind: "unknown",
      why: "it could not be reached for 24 hours (last: upstream_unavailable)",
    });
    expect(failurePlan(null, old, NOW, "Error: boom")).toEqual({
      kind: "unknown",
      why: "it could not be reached for 24 hours (last: Error: boom)",
    });
  });

  const failures = fc.option(
    fc.record({
      status: fc.option(fc.constantFrom(200, 400, 401, 402, 409, 422, 429, 500, 502, 503)),
      code: fc.constantFrom("concurrent_limit", "rate_limit", "invalid_task_id", "validation_error", "x"),
      retryable: fc.boolean(),
      retryAfterMs: fc.option(fc.integer({ min: 0, max: 600_000 }), { nil: undefined }),
    }),
  );
  const attempts = fc.record({
    createdAt: fc.integer({ min: NOW - 2 * GIVE_UP_AFTER_MS, max: NOW }),
    submitAttempts: fc.integer({ min: 0, max: 40 }),
    conflictSince: fc.option(fc.integer({ min: NOW - 2 * CONFLICT_WINDOW_MS, max: NOW })),
  });

  it("never schedules a retry or a pause in the past", () => {
    fc.assert(
      fc.property(failures, attempts, (e, t) => {
        const plan = failurePlan(e, t, NOW);
        if (plan.kind === "retry" || plan.kind === "conflict_retry") expect(plan.at).toBeGreaterThanOrEqual(NOW);
        if (plan.kind === "rate_limit") expect(plan.until).toBeGreaterThanOrEqual(NOW);
      }),
    );
  });

  it("never ends in a charge: only a 4xx refusal fails as refused, and no failure is a retry without a delay", () => {
    fc.assert(
      fc.property(failures, attempts, (e, t) => {
        const plan = failurePlan(e, t, NOW);
        // A refused task is one the upstream created nothing for: never a 2xx, never a 401, never retryable.
        if (plan.kind === "refused") {
          expect(e).not.toBeNull();
          expect(e!.retryable).toBe(false);
          expect(e!.status).not.toBe(401);
          expect([429, 409]).not.toContain(e!.status);
        }
        if (plan.kind === "retry") expect(plan.delay).toBeGreaterThanOrEqual(submitBackoffMs(t.submitAttempts));
      }),
    );
  });
});

describe("concurrentLimitPlan", () => {
  it("learns what runs (at least one) and waits for a nudge when ours run", () => {
    expect(concurrentLimitPlan(3, NOW)).toEqual({
      learned: { learnedMaxConcurrent: 3, learnedAt: NOW },
      retryAt: null,
    });
    expect(concurrentLimitPlan(0, NOW)).toEqual({
      learned: { learnedMaxConcurrent: 1, learnedAt: NOW },
      retryAt: NOW + BLOCKED_RECHECK_MS,
    });
  });
});

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { estimateCompletion, medianDuration, type EtaInput } from "../../src/core/eta.js";
import { TASK_PHASES } from "../../src/statuses.js";

const input = fc.record({
  phase: fc.constantFrom(...TASK_PHASES),
  submittedAt: fc.option(fc.integer({ min: 0, max: 2e12 }), { nil: null }),
  now: fc.integer({ min: 0, max: 2e12 }),
  medianMs: fc.option(fc.integer({ min: 0, max: 86_400_000 }), { nil: null }),
  ahead: fc.option(fc.integer({ min: 0, max: 10_000 }), { nil: null }),
  capacity: fc.oneof(fc.integer({ min: 1, max: 100 }), fc.constant(Number.POSITIVE_INFINITY)),
}) satisfies fc.Arbitrary<EtaInput>;

describe("estimateCompletion", () => {
  it("is never in the past relative to now", () => {
    fc.assert(
      fc.property(input, (t) => {
        const eta = estimateCompletion(t);
        return eta === null || eta >= t.now;
      }),
    );
  });

  it("is null for ended tasks and for unknown model durations", () => {
    fc.assert(
      fc.property(input, (t) => {
        expect(estimateCompletion({ ...t, phase: "done" })).toBeNull();
        expect(estimateCompletion({ ...t, medianMs: null })).toBeNull();
      }),
    );
  });

  it("is monotone in queue position for waiting tasks", () => {
    fc.assert(
      fc.property(input, fc.integer({ min: 0, max: 10_000 }), fc.integer({ min: 0, max: 10_000 }), (t, a, b) => {
        const [lo, hi] = a <= b ? [a, b] : [b, a];
        const early = estimateCompletion({ ...t, phase: "waiting", ahead: lo });
        const late = estimateCompletion({ ...t, phase: "waiting", ahead: hi });
        if (t.medianMs === null) return early === null && late === null;
        return early !== null && late !== null && early <= late;
      }),
    );
  });

  it("puts a running task at submitted_at + median, a waiting one behind its account's queue", () => {
    const base = { now: 10_000, medianMs: 4_000, capacity: 2, ahead: null } as const;
    expect(estimateCompletion({ ...base, phase: "submitted", submittedAt: 8_000 })).toBe(12_000);
    // Overdue: now, never earlier.
    expect(estimateCompletion({ ...base, phase: "submitted", submittedAt: 1_000 })).toBe(10_000);
    expect(estimateCompletion({ ...base, phase: "waiting", submittedAt: null, ahead: 4 })).toBe(10_000 + 3 * 4_000);
    expect(estimateCompletion({ ...base, phase: "waiting", submittedAt: null, ahead: null })).toBeNull();
  });
});

describe("medianDuration", () => {
  it("is null below three samples and the middle one otherwise", () => {
    expect(medianDuration([1, 2])).toBeNull();
    expect(medianDuration([5, 1, 3])).toBe(3);
    expect(medianDuration([4, 1, 3, 2])).toBe(3);
  });
});

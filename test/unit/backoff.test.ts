import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cappedBackoff, jittered } from "../../src/core/backoff.js";
import { firstPollDelay, nextPollDelay } from "../../src/core/poll-schedule.js";
import { submitBackoffMs } from "../../src/core/submit-plan.js";

describe("submission backoff", () => {
  it("doubles from one second and stops at five minutes", () => {
    expect([1, 2, 3, 4, 5].map(submitBackoffMs)).toEqual([1_000, 2_000, 4_000, 8_000, 16_000]);
    expect(submitBackoffMs(9)).toBe(256_000);
    expect(submitBackoffMs(10)).toBe(300_000);
    expect(submitBackoffMs(50)).toBe(300_000);
  });

  it("never decreases as attempts grow", () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 200 }), (n) => submitBackoffMs(n + 1) >= submitBackoffMs(n)));
  });
});

describe("poll spacing", () => {
  it("reads images sooner than videos after submission", () => {
    expect(firstPollDelay("image")).toBeLessThan(firstPollDelay("video"));
  });

  it("aims at the learned expected duration, at most a minute ahead", () => {
    expect(nextPollDelay("video", 10_000, 40_000)).toBe(30_000);
    expect(nextPollDelay("video", 0, 300_000)).toBe(60_000);
    expect(nextPollDelay("image", 9_500, 10_000)).toBe(1_000); // never below the type's minimum gap
  });

  it("backs off with age when overdue or unknown, within its bounds", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("image" as const, "video" as const),
        fc.integer({ min: 0, max: 86_400_000 }),
        fc.option(fc.integer({ min: 1, max: 3_600_000 })),
        (type, age, expected) => {
          const delay = nextPollDelay(type, age, expected);
          return delay >= 1_000 && delay <= 60_000;
        },
      ),
    );
    expect(nextPollDelay("video", 400_000, null)).toBe(60_000);
    expect(nextPollDelay("image", 20_000, null)).toBe(5_000);
  });
});

describe("cappedBackoff", () => {
  it("doubles from the base per attempt and stops at the cap", () => {
    expect([0, 1, 2, 3].map((attempt) => cappedBackoff({ attempt, baseMs: 500, maxMs: 30_000 }))).toEqual([
      500, 1_000, 2_000, 4_000,
    ]);
    expect(cappedBackoff({ attempt: 6, baseMs: 500, maxMs: 30_000 })).toBe(30_000);
    expect(cappedBackoff({ attempt: 5_000, baseMs: 500, maxMs: 30_000 })).toBe(30_000);
  });

  it("treats a negative attempt as the first", () => {
    expect(cappedBackoff({ attempt: -1, baseMs: 1_000, maxMs: 300_000 })).toBe(1_000);
  });

  it("doubles a kept value as attempt 1 from it", () => {
    expect(cappedBackoff({ attempt: 1, baseMs: 200, maxMs: 1_000 })).toBe(400);
    expect(cappedBackoff({ attempt: 1, baseMs: 800, maxMs: 1_000 })).toBe(1_000);
  });

  it("spreads by the jitter fraction either way, still under the cap", () => {
    const at = (r: number, attempt = 2) =>
      cappedBackoff({ attempt, baseMs: 1_000, maxMs: 5_000, jitter: 0.2, random: () => r });
    expect([at(0), at(0.5), at(0.999_999_9)]).toEqual([3_200, 4_000, 4_800]);
    expect(at(0.999_999_9, 3)).toBe(5_000);
    expect(at(0, 3)).toBe(4_000);
  });

  it("is never above the cap, never below the base without jitter, and monotone", () => {
    const input = fc.record({
      attempt: fc.integer({ min: 0, max: 2_000 }),
      baseMs: fc.integer({ min: 1, max: 100_000 }),
      extra: fc.integer({ min: 0, max: 10_000_000 }),
      jitter: fc.double({ min: 0, max: 0.9, noNaN: true }),
      r: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    });
    fc.assert(
      fc.property(input, ({ attempt, baseMs, extra, jitter, r }) => {
        const maxMs = baseMs + extra;
        const plain = cappedBackoff({ attempt, baseMs, maxMs });
        const next = cappedBackoff({ attempt: attempt + 1, baseMs, maxMs });
        const spread = cappedBackoff({ attempt, baseMs, maxMs, jitter, random: () => r });
        return plain <= maxMs && plain >= baseMs && next >= plain && spread <= maxMs && spread >= 0;
      }),
    );
  });
});

describe("jittered", () => {
  it("keeps 0 at 0 and stays inside the band after rounding", () => {
    expect(jittered(0, 0.2, () => 0.9)).toBe(0);
    expect(jittered(7, 0.2, () => 0)).toBe(6);
    expect(jittered(7, 0.2, () => 0.999_999_9)).toBe(8);
  });
});

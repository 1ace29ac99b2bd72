import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { firstPollDelay, nextPollDelay } from "../../src/core/poll-schedule.js";
import { submitBackoffMs } from "../../src/workers/submitter.js";

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

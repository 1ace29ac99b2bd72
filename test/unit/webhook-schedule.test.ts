import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseSchedule } from "../../src/duration.js";
import { MAX_RETRY_AFTER_MS, parseRetryAfter, retryDelayMs } from "../../src/webhooks/schedule.js";

const DEFAULT_SCHEDULE = parseSchedule("0s,5s,5m,30m,2h,5h,10h,10h") as number[];

describe("retryDelayMs", () => {
  it("always stays within ±20% of the scheduled delay, and 0 stays 0", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 48 * 3_600_000 }), { minLength: 1, maxLength: 12 }),
        fc.nat(),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (schedule, rawIndex, r) => {
          const index = rawIndex % schedule.length;
          const base = schedule[index] as number;
          const delay = retryDelayMs(schedule, index, () => r);
          expect(delay).not.toBeNull();
          expect(Number.isInteger(delay)).toBe(true);
          if (base === 0) expect(delay).toBe(0);
          expect(delay as number).toBeGreaterThanOrEqual(base * 0.8);
          expect(delay as number).toBeLessThanOrEqual(base * 1.2);
        },
      ),
    );
  });

  it("reaches both ends of the jitter range", () => {
    expect(retryDelayMs([10_000], 0, () => 0)).toBe(8_000);
    expect(retryDelayMs([10_000], 0, () => 0.5)).toBe(10_000);
    expect(retryDelayMs([10_000], 0, () => 0.999_999_9)).toBe(12_000);
  });

  it("keeps the first default attempt immediate and jitters the rest", () => {
    expect(retryDelayMs(DEFAULT_SCHEDULE, 0, () => 0.99)).toBe(0);
    expect(retryDelayMs(DEFAULT_SCHEDULE, 2, () => 0)).toBe(240_000);
  });

  it("uses Math.random by default", () => {
    for (let i = 0; i < 100; i++) {
      const d = retryDelayMs([5_000], 0) as number;
      expect(d).toBeGreaterThanOrEqual(4_000);
      expect(d).toBeLessThanOrEqual(6_000);
    }
  });

  it("returns null once the schedule is exhausted", () => {
    expect(retryDelayMs(DEFAULT_SCHEDULE, 7, () => 0.5)).toBe(36_000_000);
    expect(retryDelayMs(DEFAULT_SCHEDULE, 8)).toBeNull();
    expect(retryDelayMs(DEFAULT_SCHEDULE, 100)).toBeNull();
    expect(retryDelayMs([], 0)).toBeNull();
  });

  it("refuses a negative or fractional attempt index", () => {
    expect(() => retryDelayMs([1000], -1)).toThrow(RangeError);
    expect(() => retryDelayMs([1000], 0.5)).toThrow(RangeError);
  });
});

describe("parseRetryAfter", () => {
  const now = Date.UTC(2026, 0, 1, 12, 0, 0);

  it("reads delta-seconds", () => {
    expect(parseRetryAfter("0", now)).toBe(0);
    expect(parseRetryAfter("120", now)).toBe(120_000);
    expect(parseRetryAfter(" 30 ", now)).toBe(30_000);
  });

  it("reads the three HTTP-date forms relative to now", () => {
    expect(parseRetryAfter("Thu, 01 Jan 2026 12:02:00 GMT", now)).toBe(120_000);
    expect(parseRetryAfter("Thursday, 01-Jan-26 12:00:30 GMT", now)).toBe(30_000);
    expect(parseRetryAfter("Thu Jan  1 12:00:10 2026", now)).toBe(10_000);
  });

  it("treats a date already past as now", () => {
    expect(parseRetryAfter("Thu, 01 Jan 2026 11:00:00 GMT", now)).toBe(0);
  });

  it("caps at one hour", () => {
    expect(parseRetryAfter("3601", now)).toBe(MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter("99999999999999999999", now)).toBe(3_600_000);
    expect(parseRetryAfter("Fri, 02 Jan 2026 12:00:00 GMT", now)).toBe(3_600_000);
  });

  it.each([
    [null],
    [undefined],
    [""],
    ["   "],
    ["-5"],
    ["1.5"],
    ["5s"],
    ["soon"],
    ["1e3"],
    ["0x10"],
    ["2026-01-01T12:02:00Z"],
    ["Thu, 32 Jan 2026 12:02:00 GMT"],
  ])("returns null for %j", (value) => {
    expect(parseRetryAfter(value, now)).toBeNull();
  });
});

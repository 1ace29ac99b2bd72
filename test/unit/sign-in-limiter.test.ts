import { describe, expect, it } from "vitest";
import { SignInLimiter } from "../../src/http/dashboard/session.js";
import { FakeClock } from "../helpers/fake-clock.js";

describe("SignInLimiter", () => {
  it("waits until the oldest of `max` failures leaves the window, in whole seconds", () => {
    const clock = new FakeClock();
    const limiter = new SignInLimiter(clock, 3, 60_000);
    for (let i = 0; i < 3; i++) {
      expect(limiter.retryAfter("10.0.0.1")).toBe(0);
      limiter.fail("10.0.0.1");
      clock.advance(10_000);
    }
    // Failures at 0, 10 s and 20 s; now 30 s: the first leaves at 60 s.
    expect(limiter.retryAfter("10.0.0.1")).toBe(30);
    expect(limiter.retryAfter("10.0.0.2")).toBe(0);
    clock.advance(29_500);
    expect(limiter.retryAfter("10.0.0.1")).toBe(1);
    clock.advance(500);
    expect(limiter.retryAfter("10.0.0.1")).toBe(0);
  });
});

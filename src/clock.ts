/**
 * Time source for everything that schedules. Production uses the system clock;
 * tests pass a FakeClock (test/helpers/fake-clock.ts) and advance it explicitly.
 * All persisted timestamps are integer milliseconds from this clock, never SQL now().
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

import type { Clock } from "../../src/clock.js";

/** A clock that moves only when a test says so. */
export class FakeClock implements Clock {
  constructor(private current: number = Date.UTC(2026, 0, 1, 12, 0, 0)) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): number {
    this.current += ms;
    return this.current;
  }
  set(ms: number): void {
    this.current = ms;
  }
}

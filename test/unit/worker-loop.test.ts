import { afterEach, describe, expect, it, vi } from "vitest";
import { systemClock } from "../../src/clock.js";
import { silentLogger } from "../../src/logger.js";
import { WorkerLoop } from "../../src/workers/loop.js";

/** A loop whose ticks are counted; `next()` resolves when the next tick starts. */
function counted(opts: { coalesceMs?: number; during?: (n: number) => void } = {}) {
  const starts: number[] = [];
  let waiter: (() => void) | null = null;
  const loop = new WorkerLoop({
    name: "test",
    clock: systemClock,
    logger: silentLogger,
    idleMs: 60_000,
    ...(opts.coalesceMs !== undefined ? { coalesceMs: opts.coalesceMs } : {}),
    tick: async () => {
      starts.push(performance.now());
      opts.during?.(starts.length);
      waiter?.();
      waiter = null;
      return { didWork: false, nextDueAt: null };
    },
  });
  const next = () => new Promise<void>((resolve) => (waiter = resolve));
  return { loop, starts, next };
}

const loops: WorkerLoop[] = [];
afterEach(async () => {
  vi.useRealTimers();
  while (loops.length > 0) await loops.pop()!.stop();
});

describe("WorkerLoop nudges", () => {
  it("a burst of nudges while asleep makes one tick, no earlier than coalesceMs after the last", async () => {
    vi.useFakeTimers();
    const { loop, starts } = counted({ coalesceMs: 40 });
    loops.push(loop);
    loop.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(starts).toHaveLength(1);
    for (let i = 0; i < 100; i++) loop.nudge();
    await vi.advanceTimersByTimeAsync(39);
    expect(starts).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(starts).toHaveLength(2);
    // Nothing else pending: no third tick follows on its own before the idle minute is over.
    await vi.advanceTimersByTimeAsync(59_000);
    expect(starts).toHaveLength(2);
  });

  it("nudges during a tick make exactly one more tick", async () => {
    vi.useFakeTimers();
    const { loop, starts } = counted({
      coalesceMs: 5,
      during: (n) => {
        if (n === 1) for (let i = 0; i < 3; i++) loop.nudge();
      },
    });
    loops.push(loop);
    loop.start();
    await vi.advanceTimersByTimeAsync(5);
    expect(starts).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(59_000);
    expect(starts).toHaveLength(2);
  });

  it("without coalescing, a nudge runs the next tick at once", async () => {
    const { loop, starts, next } = counted();
    loops.push(loop);
    const first = next();
    loop.start();
    await first;
    const second = next();
    loop.nudge();
    await second;
    expect(starts).toHaveLength(2);
    expect(starts[1]! - starts[0]!).toBeLessThan(30_000);
  });
});

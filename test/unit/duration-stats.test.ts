import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import { DURATION_SAVE_EVERY_MS, DurationStats } from "../../src/workers/duration-stats.js";
import { FakeClock } from "../helpers/fake-clock.js";

/** A store whose duration rows are a map, with every write recorded. */
function samplesStore() {
  const rows = new Map<string, number[]>();
  const writes: Array<{ model: string; samples: number[]; at: number }> = [];
  const store = {
    accounts: {
      durationSamples: async (type: string, model: string) => [...(rows.get(`${type}/${model}`) ?? [])],
      saveDurationSamples: async (type: string, model: string, samples: number[], at: number) => {
        rows.set(`${type}/${model}`, [...samples]);
        writes.push({ model, samples: [...samples], at });
      },
    },
  } as unknown as Store;
  return { store, rows, writes };
}

describe("DurationStats writes behind", () => {
  it("a burst of completions of one model writes its row once per interval, and flush() writes the rest", async () => {
    const clock = new FakeClock();
    const { store, rows, writes } = samplesStore();
    const stats = new DurationStats(store, clock);
    for (let i = 1; i <= 20; i++) {
      await stats.record("image", "m1", i * 1000);
      clock.advance(100);
    }
    // 20 completions within 2 s: the first is written at once, the other 19 wait for the interval.
    expect(writes).toHaveLength(1);
    expect(await stats.expected("image", "m1")).toBe(11_000);
    clock.advance(DURATION_SAVE_EVERY_MS);
    await stats.record("image", "m1", 21_000);
    expect(writes).toHaveLength(2);
    expect(rows.get("image/m1")).toHaveLength(21);
    await stats.record("image", "m1", 22_000);
    expect(writes).toHaveLength(2);
    await stats.flush();
    expect(writes).toHaveLength(3);
    expect(rows.get("image/m1")).toHaveLength(22);
    // Nothing left to write: a second flush writes nothing.
    await stats.flush();
    expect(writes).toHaveLength(3);
  });

  it("each model has its own interval, and what was written is what a restart learns from", async () => {
    const clock = new FakeClock();
    const { store, writes } = samplesStore();
    const stats = new DurationStats(store, clock);
    await stats.record("image", "a", 4000);
    await stats.record("image", "b", 8000);
    expect(writes.map((w) => w.model)).toEqual(["a", "b"]);
    for (const ms of [5000, 6000]) await stats.record("image", "a", ms);
    await stats.flush();
    const restarted = new DurationStats(store, clock);
    expect(await restarted.expected("image", "a")).toBe(5000);
  });
});

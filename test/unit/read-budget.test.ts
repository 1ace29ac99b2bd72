import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, onTestFinished } from "vitest";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { sqliteStore } from "../../src/open-store.js";
import type { Store } from "../../src/store/store.js";
import { ReadBudget } from "../../src/workers/read-budget.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { maxInWindow } from "../../src/bench/scheduling-sim.js";

const MINUTE = 60_000;

let dir: string;
let database: Database_;
let store: Store;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-budget-"));
  database = openDatabase(join(dir, "relay.db"));
  store = sqliteStore(database);
});
afterEach(() => {
  database.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("ReadBudget", () => {
  it("readsInLast: the reads of the last `ms`, as sweeps pace on them", async () => {
    const clock = new FakeClock();
    const budget = new ReadBudget(store, clock, 100);
    for (let i = 0; i < 5; i++) {
      expect(await budget.take("acct_last")).toBe(true);
      clock.advance(10_000);
    }
    // Reads at -50, -40, -30, -20 and -10 s.
    expect(budget.readsInLast("acct_last", 25_000)).toBe(2);
    expect(budget.readsInLast("acct_last", 50_000)).toBe(4);
    expect(budget.readsInLast("acct_last", 61_000)).toBe(5);
    clock.advance(20_000);
    // The oldest has left the window.
    expect(budget.readsInLast("acct_last", 61_000)).toBe(4);
  });

  it("property: over random take() timings, no 60 s window holds more than perMinute reads, and a refusal is always justified", async () => {
    // The budget's arithmetic on the store's own statements, on an in-memory database: on a file, each
    // take's commit waited for an fdatasync of the WAL (about 2,000 a run), so under a busy disk the
    // test's time was the disk's (3.7 s quiet, 20 s and more under load).
    const memory = openDatabase(":memory:");
    onTestFinished(() => memory.close());
    const store = sqliteStore(memory);
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 15 }),
        fc.array(
          fc.record({
            gap: fc.oneof(fc.integer({ min: 0, max: 2_000 }), fc.integer({ min: 0, max: 70_000 })),
            tries: fc.integer({ min: 1, max: 6 }),
          }),
          { minLength: 1, maxLength: 120 },
        ),
        fc.boolean(),
        async (perMinute, steps, restartHalfway) => {
          // One account per run on the shared database: runs cannot see each other's reads.
          const account = `acct_${run++}`;
          const clock = new FakeClock();
          let budget = new ReadBudget(store, clock, perMinute);
          const taken: number[] = [];
          for (const [i, step] of steps.entries()) {
            clock.advance(step.gap);
            if (restartHalfway && i === Math.floor(steps.length / 2)) budget = new ReadBudget(store, clock, perMinute);
            for (let k = 0; k < step.tries; k++) {
              const now = clock.now();
              if (await budget.take(account)) {
                taken.push(now);
              } else {
                // Refused only when the last minute (plus the safety second) really is full.
                const recent = taken.filter((at) => at > now - MINUTE - 1_000).length;
                expect(recent).toBeGreaterThanOrEqual(perMinute);
                expect(budget.nextAvailableAt(account)).toBeGreaterThan(now);
              }
            }
          }
          expect(maxInWindow(taken, MINUTE)).toBeLessThanOrEqual(perMinute);
          expect(budget.used(account)).toBeLessThanOrEqual(perMinute);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("nextAvailableAt(n): the moment n reads are free at once", async () => {
    const clock = new FakeClock();
    const budget = new ReadBudget(store, clock, 3);
    await budget.load("n");
    const at: number[] = [];
    for (let i = 0; i < 3; i++) {
      at.push(clock.now());
      expect(await budget.take("n")).toBe(true);
      clock.advance(10_000);
    }
    // Two free at once: the two oldest reads must leave the window (60 s and the safety second).
    const two = budget.nextAvailableAt("n", 2);
    expect(two).toBe(at[1]! + MINUTE + 1_000 + 1);
    expect(budget.nextAvailableAt("n", 3)).toBe(at[2]! + MINUTE + 1_000 + 1);
    expect(budget.nextAvailableAt("n", 99)).toBe(budget.nextAvailableAt("n", 3));
    // (One millisecond of margin: the window drops a read exactly 61 s after it.)
    clock.set(two - 2);
    expect(budget.available("n")).toBe(1);
    clock.set(two);
    expect(budget.available("n")).toBe(2);
  });

  it("nextAvailableAt: now while there is room; else the moment the oldest read leaves the window", async () => {
    const clock = new FakeClock();
    const budget = new ReadBudget(store, clock, 3);
    expect(budget.nextAvailableAt("a")).toBe(clock.now());
    const first = clock.now();
    expect(await budget.take("a")).toBe(true);
    clock.advance(10_000);
    expect(await budget.take("a")).toBe(true);
    clock.advance(10_000);
    expect(await budget.take("a")).toBe(true);
    expect(budget.available("a")).toBe(0);
    expect(await budget.take("a")).toBe(false);

    const next = budget.nextAvailableAt("a");
    // The window is 60 s plus a safety second against clock skew with the upstream.
    expect(next).toBeGreaterThanOrEqual(first + MINUTE);
    expect(next).toBeLessThanOrEqual(first + MINUTE + 1_001);
    clock.set(next - 1_001);
    expect(await budget.take("a")).toBe(false);
    clock.set(next);
    expect(budget.available("a")).toBe(1);
    expect(await budget.take("a")).toBe(true);
    expect(await budget.take("a")).toBe(false);
    // Other accounts have their own budget.
    await budget.load("b");
    expect(budget.available("b")).toBe(3);
  });

  it("pause(): no reads until then, the later of two pauses wins, and it survives a restart", async () => {
    const clock = new FakeClock();
    const budget = new ReadBudget(store, clock, 10);
    const until = clock.now() + 20_000;
    await budget.pause("a", until);
    await budget.pause("a", until - 5_000);
    expect(budget.available("a")).toBe(0);
    expect(await budget.take("a")).toBe(false);
    expect(budget.nextAvailableAt("a")).toBe(until);
    await budget.load("b");
    expect(budget.available("b")).toBe(10);

    clock.set(until - 1);
    const restarted = new ReadBudget(store, clock, 10);
    expect(await restarted.take("a")).toBe(false);
    expect(restarted.nextAvailableAt("a")).toBe(until);

    clock.set(until);
    expect(await budget.take("a")).toBe(true);
    expect(await restarted.take("a")).toBe(true);
  });

  it("after a restart, a shorter pause does not cut short the longer one already stored", async () => {
    const clock = new FakeClock();
    const until = clock.now() + 60_000;
    await new ReadBudget(store, clock, 10).pause("a", until);
    const restarted = new ReadBudget(store, clock, 10);
    await restarted.pause("a", clock.now() + 5_000);
    clock.advance(10_000);
    expect(await restarted.take("a")).toBe(false);
    expect(restarted.nextAvailableAt("a")).toBe(until);
    const fresh = new ReadBudget(store, clock, 10);
    await fresh.load("a");
    expect(fresh.nextAvailableAt("a")).toBe(until);
  });

  it("a restart (new ReadBudget on the same database) still counts the reads of the last minute", async () => {
    const clock = new FakeClock();
    const before = new ReadBudget(store, clock, 5);
    for (let i = 0; i < 4; i++) {
      expect(await before.take("a")).toBe(true);
      clock.advance(5_000);
    }
    const after = new ReadBudget(store, clock, 5);
    await after.load("a");
    expect(after.used("a")).toBe(4);
    expect(after.available("a")).toBe(1);
    expect(await after.take("a")).toBe(true);
    expect(await after.take("a")).toBe(false);

    // Once the minute has passed, the old reads no longer count.
    clock.advance(MINUTE + 1_000);
    const later = new ReadBudget(store, clock, 5);
    await later.load("a");
    expect(later.available("a")).toBe(5);
  });
});

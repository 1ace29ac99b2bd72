import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../../src/config.js";
import { nudgesByName, type Nudges, type Wakeable } from "../../src/core/nudges.js";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import { silentLogger } from "../../src/logger.js";
import { Relay } from "../../src/relay.js";
import type { WorkerLoop } from "../../src/workers/loop.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { memoryStore } from "../helpers/memory-store.js";

const TARGETS = ["submitter", "poller", "dispatcher", "mirror"] as const satisfies ReadonlyArray<keyof Nudges>;

let store: SqliteStore;
let relay: Relay;
beforeEach(() => {
  store = memoryStore();
  const config = loadConfig({
    DATABASE_PATH: ":memory:",
    UPSTREAM_BASE_URL: "https://upstream.test",
    UPSTREAM_API_KEY: "k",
    LOG_LEVEL: "silent",
  });
  relay = new Relay({
    config,
    store,
    clock: new FakeClock(),
    logger: silentLogger,
    upstream: { baseUrl: "https://upstream.test", apiKey: "k" },
  });
});
afterEach(async () => {
  vi.restoreAllMocks();
  await relay.stop(100);
  await store.close();
});

/** Spies on every loop's nudge(); returns the names of the loops nudged by `act`. */
function nudgedBy(act: () => void): string[] {
  const spies = relay.loops.map((loop) => [loop.name, vi.spyOn(loop, "nudge")] as const);
  act();
  const nudged = spies.filter(([, spy]) => spy.mock.calls.length > 0).map(([name]) => name);
  for (const [, spy] of spies) spy.mockRestore();
  return nudged;
}

describe("nudges reach their worker by name", () => {
  it("each nudge wakes only the loop of its name, whatever order relay.loops is kept in", () => {
    expect(relay.loops.map((l) => l.name).sort()).toEqual(Object.keys(relay.loopsByName).sort());
    for (const [name, loop] of Object.entries(relay.loopsByName)) expect(loop.name).toBe(name);
    // Someone reorders the list (a new loop first, say): no nudge may follow a position.
    (relay.loops as WorkerLoop[]).reverse();
    for (const target of TARGETS)
      expect(
        nudgedBy(() => relay.deps.nudges[target]!()),
        target,
      ).toEqual([target]);
    // The workers' own wake-ups after a settled attempt go to their loops too.
    expect(nudgedBy(() => relay.dispatcher.onSettled())).toEqual(["dispatcher"]);
    expect(nudgedBy(() => relay.notifier.onSettled())).toEqual(["notifier"]);
    expect(nudgedBy(() => relay.mirror.onSettled())).toEqual(["mirror"]);
  });

  it("nudges.dispatcher() wakes the sleeping dispatcher loop into another tick", async () => {
    let ticks = 0;
    let ticked: () => void = () => {};
    vi.spyOn(relay.dispatcher, "tick").mockImplementation(async () => {
      ticks += 1;
      ticked();
      return { didWork: false, nextDueAt: null };
    });
    const tick = () => new Promise<void>((resolve) => (ticked = resolve));
    const first = tick();
    relay.loopsByName.dispatcher.start();
    await first;
    // Idle now: it would sleep 30 s. The nudge must end that sleep.
    const second = tick();
    relay.deps.nudges.dispatcher();
    await second;
    expect(ticks).toBe(2);
  });

  it("nudgesByName looks the loop up when the nudge comes, so loops built after the nudges are found", () => {
    const woken: string[] = [];
    const loops = new Map<string, Wakeable>();
    const nudges = nudgesByName((name) => loops.get(name));
    nudges.poller(); // nothing built yet: no loop, no error
    for (const name of [...TARGETS].reverse()) loops.set(name, { nudge: () => woken.push(name) });
    for (const target of TARGETS) nudges[target]!();
    expect(woken).toEqual([...TARGETS]);
  });
});

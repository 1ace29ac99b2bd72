import { describe, expect, it } from "vitest";
import { StreamHub } from "../../src/core/stream-hub.js";
import { TaskWaiters, type WaitTimers } from "../../src/core/task-waiters.js";
import { TaskWatchers } from "../../src/core/task-watchers.js";
import { waitPreference } from "../../src/services/task-wait.js";

/** Timers fired by hand: a hold's time runs out when the test says so. */
function manualTimers(): WaitTimers & { fireAll(): void; pending: number } {
  const live = new Map<number, () => void>();
  let next = 0;
  return {
    set(fire) {
      live.set(++next, fire);
      return next;
    },
    clear(handle) {
      live.delete(handle as number);
    },
    fireAll() {
      for (const [h, fire] of [...live]) {
        live.delete(h);
        fire();
      }
    },
    get pending() {
      return live.size;
    },
  };
}

describe("waitPreference (RFC 7240)", () => {
  it("reads wait=N from 1 to 60 among other preferences, and ignores what it cannot honour", () => {
    expect(waitPreference("wait=1")).toBe(1);
    expect(waitPreference("wait=60")).toBe(60);
    expect(waitPreference("respond-async, wait=10")).toBe(10);
    expect(waitPreference('Wait="5"; foo=bar')).toBe(5);
    // Longer than the cap: honoured as the cap, which Preference-Applied then names.
    expect(waitPreference("wait=61")).toBe(60);
    expect(waitPreference("wait=999")).toBe(60);
    for (const bad of [undefined, "", "wait", "wait=", "wait=0", "wait=-1", "wait=1.5", "wait=abc", "x=1"])
      expect(waitPreference(bad), String(bad)).toBeNull();
  });
});

describe("TaskWaiters", () => {
  it("a wake between two reads is kept; the hold's timer and slot are given back on release", async () => {
    const timers = manualTimers();
    const waiters = new TaskWaiters({ perClient: 2, timers });
    const hold = waiters.hold("cli_a", 30_000)!;
    hold.watch("task_1");
    waiters.wake("task_1");
    await hold.next();
    expect(hold.expired).toBe(false);
    waiters.wake("task_other");
    let woken = false;
    const next = hold.next().then(() => (woken = true));
    await Promise.resolve();
    expect([woken, waiters.parked]).toEqual([false, 1]);
    waiters.wake("task_1");
    await next;
    expect(waiters.parked).toBe(0);
    hold.release();
    expect([waiters.size, waiters.watchers("task_1"), timers.pending]).toEqual([0, 0, 0]);
  });

  it("bounds each client on its own, and expires holds when their time is up or on releaseAll", async () => {
    const timers = manualTimers();
    const waiters = new TaskWaiters({ perClient: 2, timers });
    const a = [waiters.hold("cli_a", 1_000)!, waiters.hold("cli_a", 1_000)!];
    expect(waiters.hold("cli_a", 1_000)).toBeNull();
    const b = waiters.hold("cli_b", 1_000)!;
    expect(b).not.toBeNull();
    timers.fireAll();
    await Promise.all([...a, b].map((h) => h.next()));
    expect([...a, b].every((h) => h.expired)).toBe(true);
    for (const h of [...a, b]) h.release();
    const c = waiters.hold("cli_a", 60_000)!;
    const waiting = c.next();
    waiters.releaseAll();
    await waiting;
    expect(c.expired).toBe(true);
    c.release();
    // Once stopping, a new hold is expired at once: its request answers without waiting.
    expect(waiters.hold("cli_a", 60_000)!.expired).toBe(true);
  });

  it("resync wakes every held request once, not expired, and tells its subscribers", async () => {
    const waiters = new TaskWaiters({ perClient: 5, timers: manualTimers() });
    const [a, b] = [waiters.hold("cli_a", 60_000)!, waiters.hold("cli_b", 60_000)!];
    a.watch("task_1");
    b.watch("task_2");
    let told = 0;
    const stop = waiters.onResync(() => told++);
    const woken = Promise.all([a.next(), b.next()]);
    waiters.resync();
    await woken;
    expect([a.expired, b.expired, told, waiters.parked]).toEqual([false, false, 1, 0]);
    stop();
    waiters.resync();
    expect(told).toBe(1);
    // The wake-up is kept for a hold that was reading its task meanwhile: its next wait returns at once.
    await a.next();
  });
});

describe("one registry for held requests and event streams (TaskWatchers)", () => {
  function shared() {
    const registry = new TaskWatchers();
    const timers = manualTimers();
    return {
      registry,
      waiters: new TaskWaiters({ perClient: 2, timers, registry }),
      hub: new StreamHub({ perClient: 1, timers, registry }),
    };
  }

  it("one wake reaches a held request and a stream of the task; each kind keeps its own bound per client", async () => {
    const { registry, waiters, hub } = shared();
    const hold = waiters.hold("cli_a", 60_000)!;
    hold.watch("task_1");
    const sub = hub.subscribe("cli_a")!;
    sub.watch({ task: "task_1" });
    // The client at its bound of streams may still hold requests, and the other way round.
    expect(hub.subscribe("cli_a")).toBeNull();
    const second = waiters.hold("cli_a", 60_000)!;
    expect(waiters.hold("cli_a", 60_000)).toBeNull();
    expect([waiters.size, hub.size, waiters.watchers("task_1"), hub.watchers({ task: "task_1" })]).toEqual([
      2, 1, 1, 1,
    ]);
    const woken = Promise.all([hold.next(), sub.next()]);
    registry.wake({ taskId: "task_1", clientId: "cli_a" });
    const [, wake] = await woken;
    expect(wake).toEqual({ closed: false, reasons: new Set(["task"]) });
    expect(hold.expired).toBe(false);
    for (const h of [hold, second]) await h.release();
    sub.release();
    expect([waiters.size, hub.size, registry.size("hold"), registry.size("stream")]).toEqual([0, 0, 0, 0]);
  });

  it("a resync wakes both kinds once and tells its listeners once; shutdown ends both and refuses new streams", async () => {
    const { registry, waiters, hub } = shared();
    const hold = waiters.hold("cli_a", 60_000)!;
    hold.watch("task_1");
    const sub = hub.subscribe("cli_b")!;
    sub.watch({ client: "cli_b" });
    let told = 0;
    registry.onResync(() => told++);
    const woken = Promise.all([hold.next(), sub.next()]);
    waiters.resync();
    const [, wake] = await woken;
    expect([wake, told]).toEqual([{ closed: false, reasons: new Set(["all"]) }, 1]);
    const ending = Promise.all([hold.next(), sub.next()]);
    hub.closeAll();
    const [, closed] = await ending;
    expect([hold.expired, closed]).toEqual([true, { closed: true }]);
    expect(hub.subscribe("cli_c")).toBeNull();
    expect(waiters.hold("cli_c", 60_000)!.expired).toBe(true);
  });
});

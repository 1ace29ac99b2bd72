import { describe, expect, it } from "vitest";
import { newRound, redeliverLast } from "../../src/core/delivery.js";
import type { Store } from "../../src/store/store.js";
import {
  attemptOf,
  claimEvents,
  client,
  conformance,
  eventsOf,
  fresh,
  NOW,
  opts,
  ownKeyEvents,
  task,
  type Probe,
} from "../helpers/conformance.js";

/** EventStore conformance (checklist: store-conformance.md): the outbox, claims, attempts, re-queues and the feed, on both drivers. */
const suite = conformance();

/** One pending event of a new client to a host of its own, and that key. */
async function ownEvent(store: Store) {
  const { events, key } = await ownKeyEvents(store, 1);
  return { event: events[0]!, key };
}

/** ownEvent, claimed under the token "t:mine" (through its key's trial, which leaves every other key alone). */
async function claimedEvent(store: Store) {
  const own = await ownEvent(store);
  const claimed = await store.events.claimTrial(own.key, { now: NOW, leaseMs: 60_000, token: "t:mine" });
  expect(claimed?.id).toBe(own.event.id);
  return own;
}

describe.each(suite.dialects)("EventStore on %s", (_name, h) => {
  it("claimDue: due, pending, unleased events, oldest due first, under a lease; a task's later event waits for its earlier one", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, "two-events"));
    const running = await store.tasks.transition(t, { status: "processing", phase: "submitted" }, opts(null, NOW - 2));
    await store.tasks.transition(running!, { status: "succeeded", phase: "done" }, opts(null, NOW - 1));
    const {
      events: [other],
    } = await eventsOf(store, 1);
    const [processing, succeeded] = await store.events.ofTask(t.id);
    const first = await claimEvents(store, "d:1", { limit: 1 });
    expect(first.map((e) => [e.id, e.claimToken, e.claimedUntil])).toEqual([[processing!.id, "d:1", NOW + 30_000]]);
    expect((await claimEvents(store, "d:2")).map((e) => e.id)).toEqual([other!.id]);
    await store.events.release(processing!.id, "d:1", { deliveryStatus: "succeeded" });
    expect((await claimEvents(store, "d:3")).map((e) => e.id)).toEqual([succeeded!.id]);
    expect(await claimEvents(store, "d:4")).toEqual([]);
    expect(await claimEvents(store, "d:5", { limit: 0 })).toEqual([]);
  });

  it("claimDue leaves out excluded keys and clients and takes at most keyRoom of a key", async () => {
    const { store } = await h.fresh();
    const a = await eventsOf(store, 3, "https://a.example/x");
    const b = await eventsOf(store, 3, "https://b.example/x");
    expect(
      (await claimEvents(store, "d:0", { excludeKeys: [`${a.clientId}|a.example:443`], excludeClients: [b.clientId] }))
        .length,
    ).toBe(0);
    const picked = await claimEvents(store, "d:1", { keyRoom: (key) => (key.startsWith(a.clientId) ? 2 : 1) });
    expect(picked.filter((e) => e.clientId === a.clientId)).toHaveLength(2);
    expect(picked.filter((e) => e.clientId === b.clientId)).toHaveLength(1);
  });

  it("nextDueAt: the earliest unleased pending event, keys and clients left out; null with none", async () => {
    const { store } = await h.fresh();
    expect(await store.events.nextDueAt({ now: NOW, excludeKeys: [] })).toBeNull();
    const a = await ownEvent(store);
    const b = await ownEvent(store);
    await store.events.postponeKey(b.key.clientId, b.key.host, NOW + 500, NOW);
    expect(await store.events.nextDueAt({ now: NOW, excludeKeys: [] })).toBe(NOW);
    expect(await store.events.nextDueAt({ now: NOW, excludeKeys: [`${a.key.clientId}|${a.key.host}`] })).toBe(
      NOW + 500,
    );
    expect(
      await store.events.nextDueAt({ now: NOW, excludeKeys: [], excludeClients: [a.key.clientId, b.key.clientId] }),
    ).toBeNull();
    await claimEvents(store, "d:1", { now: NOW + 500 });
    expect(await store.events.nextDueAt({ now: NOW + 500, excludeKeys: [] })).toBeNull();
  });

  it("claimTrial, postponeKey, retryKeyNow and pendingOfKey act on one key", async () => {
    const store = await h.shared();
    const { event, key } = await ownEvent(store);
    const other = await ownEvent(store);
    expect(await store.events.pendingOfKey(key)).toBe(1);
    expect(await store.events.postponeKey(key.clientId, key.host, NOW + 60_000, NOW)).toBe(1);
    expect(await store.events.claimTrial(key, { now: NOW, leaseMs: 1_000, token: "t:0" })).toBeUndefined();
    expect(await store.events.retryKeyNow(key, NOW + 1)).toBe(1);
    expect(await store.events.claimTrial(key, { now: NOW + 1, leaseMs: 1_000, token: "t:1" })).toMatchObject({
      id: event.id,
      claimToken: "t:1",
      nextAttemptAt: NOW + 1,
    });
    // Leased: left alone by retry-now and postponement, still pending.
    expect(await store.events.retryKeyNow(key, NOW + 2)).toBe(0);
    expect(await store.events.postponeKey(key.clientId, key.host, NOW + 90_000, NOW + 2)).toBe(0);
    expect(await store.events.pendingOfKey(key)).toBe(1);
    expect((await store.events.find(other.event.id))!.nextAttemptAt).toBe(NOW);
  });

  it("recordAttempt stores the attempt and the event's new state under the lease, released; a stale token's attempt is kept but changes no event", async () => {
    const store = await h.shared();
    const { event } = await claimedEvent(store);
    const stale = attemptOf(event, 500, { attemptedAt: NOW + 1 });
    await store.events.recordAttempt(event.id, "t:other", stale, { deliveryStatus: "failed" });
    const ok = attemptOf(event, 204, { attemptedAt: NOW + 2, responseBody: "thanks" });
    await store.events.recordAttempt(event.id, "t:mine", ok, {
      deliveryStatus: "succeeded",
      deliveredAt: NOW + 2,
      attempts: 1,
      lastStatusCode: 204,
    });
    expect(await store.events.find(event.id)).toEqual({
      ...event,
      deliveryStatus: "succeeded",
      deliveredAt: NOW + 2,
      attempts: 1,
      lastStatusCode: 204,
      claimToken: null,
      claimedUntil: null,
    });
    expect(await store.events.attemptsOfTask(event.taskId)).toEqual([stale, ok]);
  });

  it("release writes a leased event's patch and the lease ends; another token changes nothing", async () => {
    const store = await h.shared();
    const { event } = await claimedEvent(store);
    await store.events.release(event.id, "t:other", { deliveryStatus: "failed" });
    expect((await store.events.find(event.id))!.claimToken).toBe("t:mine");
    await store.events.release(event.id, "t:mine", { nextAttemptAt: NOW + 5_000, lastError: "timeout" });
    expect(await store.events.find(event.id)).toEqual({
      ...event,
      nextAttemptAt: NOW + 5_000,
      lastError: "timeout",
      claimToken: null,
      claimedUntil: null,
    });
  });

  it("requeueLastOfTask, requeueFailed and retryingOfClient", async () => {
    const store = await h.shared();
    const { clientId, events } = await eventsOf(store, 3);
    for (let i = 0; i < events.length; i++) {
      const trial = await store.events.claimTrial(
        { clientId, host: "hooks.example:443" },
        { now: NOW, leaseMs: 60_000, token: "t:1" },
      );
      await store.events.release(trial!.id, "t:1", {
        deliveryStatus: "failed",
        failedAt: NOW,
        attempts: 8,
        roundAttempts: 8,
        lastStatusCode: 500,
      });
    }
    expect(await store.events.requeueLastOfTask(events[0]!.taskId, newRound(NOW + 1))).toMatchObject({
      id: events[0]!.id,
      deliveryStatus: "pending",
      roundAttempts: 0,
      attempts: 8,
      nextAttemptAt: NOW + 1,
      failedAt: null,
    });
    expect(await store.events.requeueLastOfTask("task_nobody", newRound(NOW))).toBeUndefined();
    expect(await store.events.retryingOfClient(clientId)).toBe(1);
    expect(await store.events.requeueFailed(clientId, NOW + 1, newRound(NOW + 2))).toBe(0);
    expect(await store.events.requeueFailed(clientId, NOW, newRound(NOW + 2))).toBe(2);
    expect(await store.events.retryingOfClient(clientId)).toBe(3);
    expect(await store.events.retryingOfClient("cli_nobody")).toBe(0);
  });

  it("find, lastOfTask, lastOfTasks and ofTask read a task's events in order", async () => {
    const store = await h.shared();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, fresh("k")));
    const running = await store.tasks.transition(t, { status: "processing", phase: "submitted" }, opts());
    await store.tasks.transition(running!, { status: "failed", phase: "done" }, opts(null, NOW + 1));
    const {
      events: [single],
    } = await eventsOf(store, 1);
    const all = await store.events.ofTask(t.id);
    expect(all.map((e) => [e.type, e.sequence, e.clientSeq])).toEqual([
      ["task.processing", 1, 0],
      ["task.failed", 2, 0],
    ]);
    expect(await store.events.find(all[0]!.id)).toEqual(all[0]);
    expect(await store.events.lastOfTask(t.id)).toEqual(all[1]);
    const last = await store.events.lastOfTasks([t.id, single!.taskId, "task_nobody"]);
    expect([...last.entries()].sort()).toEqual(
      [
        [t.id, all[1]],
        [single!.taskId, single],
      ].sort(),
    );
    expect((await store.events.lastOfTasks([])).size).toBe(0);
    expect(await store.events.find("evt_nobody")).toBeUndefined();
    expect(await store.events.lastOfTask("task_nobody")).toBeUndefined();
    expect(await store.events.ofTask("task_nobody")).toEqual([]);
    expect(await store.events.attemptsOfTask("task_nobody")).toEqual([]);
    // Written without a feed position; reading the client's feed hands them out, in order.
    expect((await store.events.feed(c.id, 0, 10)).map((e) => [e.type, e.clientSeq])).toEqual([
      ["task.processing", 1],
      ["task.failed", 2],
    ]);
  });

  it("feed reads a client's events after a position, oldest first; clientSeqAtOrBefore maps a relay-wide seq to the client's position", async () => {
    const store = await h.shared();
    const { clientId, events } = await eventsOf(store, 4);
    await eventsOf(store, 2);
    expect((await store.events.feed(clientId, 0, 10)).map((e) => e.id)).toEqual(events.map((e) => e.id));
    expect((await store.events.feed(clientId, 1, 2)).map((e) => e.clientSeq)).toEqual([2, 3]);
    expect(await store.events.feed(clientId, 4, 10)).toEqual([]);
    expect(await store.events.clientSeqAtOrBefore(clientId, events[2]!.seq)).toBe(3);
    expect(await store.events.clientSeqAtOrBefore(clientId, events[0]!.seq - 1)).toBe(0);
    expect(await store.events.clientSeqAtOrBefore(clientId, events[3]!.seq + 1_000)).toBe(4);
  });

  it("two claimers in two processes at once never take the same event, and together take them all", async () => {
    const { store, another } = await h.fresh();
    for (let i = 0; i < 6; i++) await eventsOf(store, 5, `https://h${i}.example/x`);
    const other = await another();
    const [a, b] = await Promise.all([
      claimEvents(store, "a:1", { limit: 20 }),
      claimEvents(other, "b:1", { limit: 20 }),
    ]);
    const ids = [...a!, ...b!].map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toHaveLength(30);
  });

  it("a trial raced by three processes goes to one of them", async () => {
    const { store, another } = await h.fresh();
    const { key } = await ownEvent(store);
    const others = [store, await another(), await another()];
    const trials = await Promise.all(
      others.map((s, i) => s.events.claimTrial(key, { now: NOW, leaseMs: 10_000, token: `t:${i}` })),
    );
    expect(trials.filter(Boolean)).toHaveLength(1);
  });

  it("a claimer that dies: its event is claimable again after the lease, and its late record changes nothing", async () => {
    const { store } = await h.fresh();
    const { event } = await ownEvent(store);
    await claimEvents(store, "dead:1");
    expect(await claimEvents(store, "live:1", { now: NOW + 30_000 })).toEqual([]);
    expect(await store.events.nextDueAt({ now: NOW + 30_001, excludeKeys: [] })).toBe(NOW);
    const [again] = await claimEvents(store, "live:1", { now: NOW + 30_001 });
    expect(again!.id).toBe(event.id);
    await store.events.recordAttempt(event.id, "dead:1", attemptOf(event, 200), { deliveryStatus: "succeeded" });
    expect(await store.events.find(event.id)).toMatchObject({ deliveryStatus: "pending", claimToken: "live:1" });
  });

  it("a redelivery while an attempt is in flight: the attempt's record cannot land over the new round", async () => {
    const store = await h.shared();
    const { event } = await claimedEvent(store);
    await redeliverLast(store, event.taskId, NOW + 10);
    await store.events.recordAttempt(event.id, "t:mine", attemptOf(event, 500), {
      deliveryStatus: "failed",
      roundAttempts: 8,
    });
    expect(await store.events.find(event.id)).toMatchObject({
      deliveryStatus: "pending",
      roundAttempts: 0,
      nextAttemptAt: NOW + 10,
      claimToken: null,
    });
  });
});

describe("EventStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    { op: "find", run: (s, v) => s.events.find(v) },
    { op: "lastOfTask", run: (s, v) => s.events.lastOfTask(v) },
    { op: "ofTask", run: (s, v) => s.events.ofTask(v) },
    { op: "attemptsOfTask", run: (s, v) => s.events.attemptsOfTask(v) },
    {
      op: "lastOfTasks([a real task, the value])",
      run: async (s, v) => (await s.events.lastOfTasks([(await ownEvent(s)).event.taskId, v])).size,
    },
    { op: "feed(clientId)", run: (s, v) => s.events.feed(v, 0, 10) },
    { op: "clientSeqAtOrBefore(clientId)", run: (s, v) => s.events.clientSeqAtOrBefore(v, 1_000) },
    {
      op: "pendingOfKey(host)",
      run: async (s, v) => s.events.pendingOfKey({ clientId: (await ownEvent(s)).key.clientId, host: v }),
    },
    { op: "retryingOfClient", run: (s, v) => s.events.retryingOfClient(v) },
    {
      op: "retryKeyNow(host)",
      run: async (s, v) => s.events.retryKeyNow({ clientId: (await ownEvent(s)).key.clientId, host: v }, NOW),
    },
    {
      op: "postponeKey(host)",
      run: async (s, v) => s.events.postponeKey((await ownEvent(s)).key.clientId, v, NOW + 1, NOW),
    },
    {
      op: "claimTrial(host)",
      run: async (s, v) =>
        s.events.claimTrial(
          { clientId: (await ownEvent(s)).key.clientId, host: v },
          { now: NOW, leaseMs: 1, token: "t:x" },
        ),
    },
    { op: "requeueLastOfTask", run: (s, v) => s.events.requeueLastOfTask(v, newRound(NOW)) },
    { op: "requeueFailed(clientId)", run: (s, v) => s.events.requeueFailed(v, 0, newRound(NOW)) },
    { op: "release(eventId)", run: (s, v) => s.events.release(v, "t:mine", { lastError: "x" }) },
    {
      op: "release(token)",
      run: async (s, v) => s.events.release((await claimedEvent(s)).event.id, v, { lastError: "x" }),
    },
    {
      op: "release(lastError)",
      roundTrip: true,
      run: async (s, v) => {
        const { event } = await claimedEvent(s);
        await s.events.release(event.id, "t:mine", { lastError: v });
        return (await s.events.find(event.id))!.lastError;
      },
    },
    {
      op: "recordAttempt(responseBody)",
      roundTrip: true,
      run: async (s, v) => {
        const { event } = await claimedEvent(s);
        await s.events.recordAttempt(event.id, "t:mine", attemptOf(event, 200, { responseBody: v }), {});
        return (await s.events.attemptsOfTask(event.taskId))[0]?.responseBody;
      },
    },
    {
      op: "claimDue(excludeKeys)",
      global: true,
      run: async (s, v) => (await ownEvent(s), (await claimEvents(s, "d:x", { excludeKeys: [v] })).length),
    },
    {
      op: "claimDue(excludeClients)",
      global: true,
      run: async (s, v) => (await ownEvent(s), (await claimEvents(s, "d:x", { excludeClients: [v] })).length),
    },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "feed(afterPos)",
      run: async (s, v) => (await s.events.feed((await ownEvent(s)).key.clientId, v, 10)).length,
    },
    { op: "feed(limit)", run: async (s, v) => (await s.events.feed((await ownEvent(s)).key.clientId, 0, v)).length },
    {
      op: "clientSeqAtOrBefore(seq)",
      run: async (s, v) => s.events.clientSeqAtOrBefore((await ownEvent(s)).key.clientId, v),
    },
    {
      op: "postponeKey(until)",
      run: async (s, v) => {
        const { event, key } = await ownEvent(s);
        await s.events.postponeKey(key.clientId, key.host, v, NOW);
        return (await s.events.find(event.id))!.nextAttemptAt;
      },
    },
    {
      op: "retryKeyNow(now)",
      run: async (s, v) => {
        const { event, key } = await ownEvent(s);
        return [await s.events.retryKeyNow(key, v), (await s.events.find(event.id))!.nextAttemptAt];
      },
    },
    {
      op: "requeueFailed(since)",
      run: async (s, v) => s.events.requeueFailed((await ownEvent(s)).key.clientId, v, newRound(NOW)),
    },
    {
      op: "release(attempts)",
      roundTrip: true,
      run: async (s, v) => {
        const { event } = await claimedEvent(s);
        await s.events.release(event.id, "t:mine", { attempts: v });
        return (await s.events.find(event.id))!.attempts;
      },
    },
    {
      op: "recordAttempt(latencyMs)",
      roundTrip: true,
      run: async (s, v) => {
        const { event } = await claimedEvent(s);
        await s.events.recordAttempt(event.id, "t:mine", attemptOf(event, 200, { latencyMs: v }), {});
        return (await s.events.attemptsOfTask(event.taskId))[0]?.latencyMs;
      },
    },
    {
      op: "claimTrial(leaseMs)",
      run: async (s, v) =>
        (await s.events.claimTrial((await ownEvent(s)).key, { now: NOW, leaseMs: v, token: "t:x" }))?.claimedUntil,
    },
    {
      op: "claimDue(limit)",
      global: true,
      run: async (s, v) => (await ownEvent(s), (await claimEvents(s, "d:x", { limit: v })).length),
    },
    {
      op: "claimDue(now)",
      global: true,
      run: async (s, v) => (await ownEvent(s), (await claimEvents(s, "d:x", { now: v })).length),
    },
    {
      op: "nextDueAt(now)",
      global: true,
      run: async (s, v) => (await ownEvent(s), s.events.nextDueAt({ now: v, excludeKeys: [] })),
    },
  ];
  suite.hostile(text, numbers);
});

import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import { conformance, NOW, ownKeyEvents, processedThenSucceeded, type Probe } from "../helpers/conformance.js";

/** EventStore.claimOfKey conformance (checklist: store-conformance.md): the refill of one delivery key, on both drivers. */
const suite = conformance();

const claimKey = (
  store: Store,
  key: { clientId: string; host: string },
  token: string,
  limit: number,
  extra: { now?: number; maxPerKey?: number } = {},
) =>
  store.events.claimOfKey(key, {
    now: extra.now ?? NOW,
    leaseMs: 30_000,
    token,
    limit,
    maxPerKey: extra.maxPerKey ?? 100,
  });

describe.each(suite.dialects)("EventStore.claimOfKey on %s", (_name, h) => {
  it("claims up to `limit` of one key's due events, oldest due first, under a lease; other keys are left alone", async () => {
    const store = await h.shared();
    const { events, key } = await ownKeyEvents(store, 3);
    const other = await ownKeyEvents(store, 1);
    const first = await claimKey(store, key, "k:1", 2);
    expect(first.map((e) => [e.id, e.claimToken, e.claimedUntil])).toEqual(
      events.slice(0, 2).map((e) => [e.id, "k:1", NOW + 30_000]),
    );
    expect((await claimKey(store, key, "k:2", 5)).map((e) => e.id)).toEqual([events[2]!.id]);
    expect(await claimKey(store, key, "k:3", 5)).toEqual([]);
    expect(await claimKey(store, key, "k:4", 0)).toEqual([]);
    expect((await store.events.find(other.events[0]!.id))!.claimToken).toBeNull();
  });

  it("a task's later event waits while its earlier one is pending", async () => {
    const store = await h.shared();
    const { processing, succeeded, key } = await processedThenSucceeded(store);
    expect((await claimKey(store, key, "k:1", 5)).map((e) => e.id)).toEqual([processing.id]);
    await store.events.release(processing.id, "k:1", { deliveryStatus: "succeeded" });
    expect((await claimKey(store, key, "k:2", 5)).map((e) => e.id)).toEqual([succeeded.id]);
  });

  it("maxPerKey: the key's leased events count against it, whichever process holds them", async () => {
    const { store, another } = await h.fresh();
    const { key } = await ownKeyEvents(store, 6);
    const other = await another();
    expect(await claimKey(store, key, "a:1", 2, { maxPerKey: 3 })).toHaveLength(2);
    expect(await claimKey(other, key, "b:1", 5, { maxPerKey: 3 })).toHaveLength(1);
  });

  it("two processes refilling one key at once never take the same event, and stay within maxPerKey together", async () => {
    const { store, another } = await h.fresh();
    const { key } = await ownKeyEvents(store, 10);
    const other = await another();
    const [a, b] = await Promise.all([
      claimKey(store, key, "a:1", 4, { maxPerKey: 6 }),
      claimKey(other, key, "b:1", 4, { maxPerKey: 6 }),
    ]);
    const ids = [...a!, ...b!].map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(6);
  });

  it("a claimer that dies: the key's events come back once the lease ends", async () => {
    const { store } = await h.fresh();
    const { events, key } = await ownKeyEvents(store, 2);
    await claimKey(store, key, "dead:1", 2);
    expect(await claimKey(store, key, "live:1", 2, { now: NOW + 30_000 })).toEqual([]);
    expect((await claimKey(store, key, "live:1", 2, { now: NOW + 30_001 })).map((e) => e.id)).toEqual(
      events.map((e) => e.id),
    );
  });
});

describe("EventStore.claimOfKey with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "claimOfKey(host)",
      run: async (s, v) => claimKey(s, { ...(await ownKeyEvents(s, 1)).key, host: v }, "k:x", 5),
    },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "claimOfKey(limit)",
      run: async (s, v) => (await claimKey(s, (await ownKeyEvents(s, 2)).key, "k:x", v)).length,
    },
    {
      op: "claimOfKey(now)",
      run: async (s, v) => (await claimKey(s, (await ownKeyEvents(s, 1)).key, "k:x", 5, { now: v })).length,
    },
  ];
  // maxPerKey is left out: the contract itself has SQLite (one process) ignore it.
  suite.hostile(text, numbers);
});

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { KeyLimit, Store } from "../../src/store/store.js";
import type { ClaimedEvent } from "../../src/store/rows.js";
import { client, conformance, NOW, ownKeyEvents, processedThenSucceeded } from "../helpers/conformance.js";

/**
 * EventStore.claimOfKeys conformance (checklist: store-conformance.md): the refills of every
 * attempt settled in one turn, several delivery keys in one statement, on both drivers.
 */
const suite = conformance();

const claimKeys = (store: Store, keys: KeyLimit[], token: string, maxPerKey = 100, now = NOW) =>
  store.events.claimOfKeys(keys, { now, leaseMs: 30_000, token, maxPerKey });

const ids = (rows: ClaimedEvent[]) => rows.map((e) => e.id);
const ofKey = (rows: ClaimedEvent[], key: { clientId: string; host: string }) =>
  rows.filter((e) => e.clientId === key.clientId && e.destinationHost === key.host);

describe.each(suite.dialects)("EventStore.claimOfKeys on %s", (_name, h) => {
  it("claims each key's first `limit` due events under one lease, oldest due first per key; keys not named are left alone", async () => {
    const store = await h.shared();
    const c = await client(store);
    const a = await ownKeyEvents(store, 3, c.id);
    const b = await ownKeyEvents(store, 2, c.id);
    const other = await ownKeyEvents(store, 1, c.id);
    const got = await claimKeys(
      store,
      [
        { ...a.key, limit: 2 },
        { ...b.key, limit: 5 },
      ],
      "ks:1",
    );
    expect(ids(ofKey(got, a.key))).toEqual(ids(a.events.slice(0, 2)));
    expect(ids(ofKey(got, b.key))).toEqual(ids(b.events));
    expect(got).toHaveLength(4);
    expect(got.every((e) => e.claimToken === "ks:1" && e.claimedUntil === NOW + 30_000)).toBe(true);
    expect((await store.events.find(other.events[0]!.id))!.claimToken).toBeNull();
    // A limit of 0, or no keys at all, claims nothing.
    expect(await claimKeys(store, [{ ...a.key, limit: 0 }], "ks:2")).toEqual([]);
    expect(await claimKeys(store, [], "ks:2")).toEqual([]);
    expect(ids(await claimKeys(store, [{ ...a.key, limit: 9 }], "ks:3"))).toEqual([a.events[2]!.id]);
  });

  it("a task's later event waits while its earlier one is pending", async () => {
    const store = await h.shared();
    const { processing, succeeded, key: own } = await processedThenSucceeded(store);
    const key = { ...own, limit: 5 };
    expect(ids(await claimKeys(store, [key], "ks:1"))).toEqual([processing.id]);
    await store.events.release(processing.id, "ks:1", { deliveryStatus: "succeeded" });
    expect(ids(await claimKeys(store, [key], "ks:2"))).toEqual([succeeded.id]);
  });

  it("maxPerKey: each key's leased events count against it, whichever process holds them", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const a = await ownKeyEvents(store, 6, c.id);
    const b = await ownKeyEvents(store, 6, c.id);
    const other = await another();
    expect(
      await store.events.claimOfKey(a.key, { now: NOW, leaseMs: 30_000, token: "a:1", limit: 2, maxPerKey: 3 }),
    ).toHaveLength(2);
    const got = await claimKeys(
      other,
      [
        { ...a.key, limit: 5 },
        { ...b.key, limit: 5 },
      ],
      "b:1",
      3,
    );
    expect(ofKey(got, a.key)).toHaveLength(1);
    expect(ofKey(got, b.key)).toHaveLength(3);
  });

  it("leaseAhead: a claimer holding every lease of a key leases past the cap up to it (SQLite; PostgreSQL stays within the cap); with another claimer's leases out, only the cap's rest", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const a = await ownKeyEvents(store, 30, c.id);
    const other = await another();
    const ahead = (s: Store, token: string, limit: number) =>
      s.events.claimOfKeys([{ ...a.key, limit, leaseAhead: 12 }], { now: NOW, leaseMs: 30_000, token, maxPerKey: 3 });
    const first = await ahead(store, "a:1", 20);
    expect(ids(first)).toEqual(ids(a.events.slice(0, _name === "sqlite" ? 12 : 3)));
    // The key is leased past (or at) the cap by a:1: another claimer takes nothing, a:1 nothing past its limit.
    expect(await ahead(other, "b:1", 20)).toEqual([]);
    expect(await ahead(store, "a:1", 20)).toEqual([]);
    // Once a:1's leases are back, b:1 holds the key alone and may lease ahead in turn.
    for (const e of first) await store.events.release(e.id, "a:1", {});
    await store.events.claimOfKey(a.key, { now: NOW, leaseMs: 30_000, token: "c:1", limit: 1, maxPerKey: 3 });
    // With c:1's one lease out, b:1 gets the cap's rest only.
    expect(await ahead(other, "b:1", 20)).toHaveLength(2);
  });

  it("property: two processes leasing ahead at once: a key's leases are one claimer's, or all of them together within the cap", async () => {
    const { store, another } = await h.fresh();
    const other = await another();
    await fc.assert(
      fc.asyncProperty(
        fc.nat(3),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 4 }),
        async (leased, limitA, limitB, maxPerKey) => {
          const c = await client(store);
          const k = await ownKeyEvents(store, 24, c.id, { together: true });
          const held = await store.events.claimOfKey(k.key, {
            now: NOW,
            leaseMs: 30_000,
            token: "elsewhere:1",
            limit: Math.min(leased, maxPerKey),
            maxPerKey,
          });
          const claim = (s: Store, token: string, limit: number) =>
            s.events.claimOfKeys([{ ...k.key, limit, leaseAhead: 16 }], {
              now: NOW,
              leaseMs: 30_000,
              token,
              maxPerKey,
            });
          const [a, b] = await Promise.all([claim(store, "a:1", limitA), claim(other, "b:1", limitB)]);
          const taken = [...ids(a), ...ids(b), ...ids(held)];
          expect(new Set(taken).size).toBe(taken.length);
          const holders = [a, b, held].filter((rows) => rows.length > 0).length;
          if (holders > 1) expect(taken.length).toBeLessThanOrEqual(maxPerKey);
          // Alone on a fresh key, a claim leases up to its lease-ahead limit (SQLite) or the cap (PostgreSQL).
          if (held.length === 0 && b.length === 0)
            expect(a).toHaveLength(Math.min(limitA, _name === "sqlite" ? 16 : maxPerKey));
        },
      ),
      { numRuns: 15 },
    );
    // 15 runs of about 75 store calls each: 4-6 s on a quiet 2-core machine, over 20 s at load 14 on PostgreSQL.
  }, 60_000);

  it("a claimer that dies: the keys' events come back once the lease ends", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const a = await ownKeyEvents(store, 2, c.id);
    await claimKeys(store, [{ ...a.key, limit: 2 }], "dead:1");
    expect(await claimKeys(store, [{ ...a.key, limit: 2 }], "live:1", 100, NOW + 30_000)).toEqual([]);
    expect(ids(await claimKeys(store, [{ ...a.key, limit: 2 }], "live:1", 100, NOW + 30_001))).toEqual(ids(a.events));
  });

  it("property: under random due sets, two processes claiming several keys at once never take one event twice nor pass a key's cap, and one claim alone takes exactly what its limits allow", async () => {
    const { store, another } = await h.fresh();
    const other = await another();
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            client: fc.nat(2),
            events: fc.nat(6),
            leased: fc.nat(3),
            limitA: fc.nat(8),
            limitB: fc.nat(8),
          }),
          { minLength: 1, maxLength: 5 },
        ),
        fc.integer({ min: 1, max: 6 }),
        async (shape, maxPerKey) => {
          const clients = await Promise.all([0, 1, 2].map(() => client(store)));
          const keys = [];
          for (const k of shape) {
            const made = await ownKeyEvents(store, k.events, clients[k.client]!.id, { together: true });
            // Some of the key's events already leased elsewhere (another process's attempts in flight).
            const held = await store.events.claimOfKey(made.key, {
              now: NOW,
              leaseMs: 30_000,
              token: "elsewhere:1",
              limit: Math.min(k.leased, maxPerKey),
              maxPerKey,
            });
            keys.push({ ...k, ...made, held });
          }
          const [a, b] = await Promise.all([
            claimKeys(
              store,
              keys.map((k) => ({ ...k.key, limit: k.limitA })),
              "a:1",
              maxPerKey,
            ),
            claimKeys(
              other,
              keys.map((k) => ({ ...k.key, limit: k.limitB })),
              "b:1",
              maxPerKey,
            ),
          ]);
          const taken = [...ids(a), ...ids(b), ...keys.flatMap((k) => ids(k.held))];
          expect(new Set(taken).size).toBe(taken.length);
          for (const k of keys) {
            const [gotA, gotB] = [ofKey(a, k.key).length, ofKey(b, k.key).length];
            expect(gotA).toBeLessThanOrEqual(k.limitA);
            expect(gotB).toBeLessThanOrEqual(k.limitB);
            const room = Math.max(0, maxPerKey - k.held.length);
            expect(gotA + gotB).toBeLessThanOrEqual(Math.min(room, k.events.length - k.held.length));
            // Neither took less than it could have taken after the other: the key is full, drained, or both claims got their limit.
            const full = gotA + gotB === Math.min(room, k.events.length - k.held.length);
            expect(full || (gotA === Math.min(k.limitA, room) && gotB === Math.min(k.limitB, room))).toBe(true);
          }
          // Alone, a claim takes exactly min(limit, cap less the key's leases, what is due) of each key.
          const alone = await claimKeys(
            store,
            keys.map((k) => ({ ...k.key, limit: k.limitA })),
            "c:1",
            maxPerKey,
          );
          for (const k of keys) {
            const leased = k.held.length + ofKey(a, k.key).length + ofKey(b, k.key).length;
            const due = k.events.length - leased;
            expect(ofKey(alone, k.key)).toHaveLength(Math.max(0, Math.min(k.limitA, maxPerKey - leased, due)));
          }
        },
      ),
      { numRuns: 15 },
    );
  });
});

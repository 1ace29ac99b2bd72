import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import { client, conformance, fresh, NOW, type Probe } from "../helpers/conformance.js";

/** KeyHealthStore conformance (checklist: store-conformance.md): the health of delivery keys, on both drivers. */
const suite = conformance();

/** A key of a new client (with someone to tell unless `notified` is false). */
async function keyOf(store: Store, notified = true) {
  const c = await client(store);
  if (notified) await store.clients.update(c.id, { notificationUrl: "https://ops.example/n" });
  return { clientId: c.id, host: `${fresh("hooks.example")}:443` };
}

describe.each(suite.dialects)("KeyHealthStore on %s", (_name, h) => {
  it("recordFailure opens a run once and counts attempts; failingOf lists the client's failing keys, longest first", async () => {
    const store = await h.shared();
    const a = await keyOf(store);
    const b = { ...a, host: `${fresh("other.example")}:443` };
    await store.keyHealth.recordFailure(b, NOW + 10, "HTTP 502");
    await store.keyHealth.recordFailure(a, NOW + 20, "HTTP 500");
    await store.keyHealth.recordFailure(a, NOW + 30, null);
    expect(await store.keyHealth.failingOf(a.clientId)).toEqual([
      {
        clientId: a.clientId,
        host: b.host,
        failingSince: NOW + 10,
        failedAttempts: 1,
        lastError: "HTTP 502",
        lastSuccessAt: null,
        noticeSentAt: null,
        updatedAt: NOW + 10,
      },
      {
        clientId: a.clientId,
        host: a.host,
        failingSince: NOW + 20,
        failedAttempts: 2,
        lastError: null,
        lastSuccessAt: null,
        noticeSentAt: null,
        updatedAt: NOW + 30,
      },
    ]);
    expect(await store.keyHealth.failingOf("cli_nobody")).toEqual([]);
  });

  it("recordSuccess ends the run and returns it; with no run open it returns null; a new failure starts afresh", async () => {
    const store = await h.shared();
    const key = await keyOf(store);
    expect(await store.keyHealth.recordSuccess(key, NOW)).toBeNull();
    await store.keyHealth.recordFailure(key, NOW + 1, "HTTP 500");
    expect(await store.keyHealth.markNoticed(key, NOW + 1, NOW + 2)).toBe(true);
    expect(await store.keyHealth.recordSuccess(key, NOW + 3)).toEqual({ failingSince: NOW + 1, noticeSentAt: NOW + 2 });
    expect(await store.keyHealth.recordSuccess(key, NOW + 4)).toBeNull();
    expect(await store.keyHealth.failingOf(key.clientId)).toEqual([]);
    await store.keyHealth.recordFailure(key, NOW + 5, "timeout");
    expect(await store.keyHealth.failingOf(key.clientId)).toMatchObject([
      { failingSince: NOW + 5, failedAttempts: 1, noticeSentAt: null, lastSuccessAt: NOW + 3 },
    ]);
  });

  it("dueForNotice: runs begun by `before`, not noticed, of clients someone can be told about (not revoked), oldest first, up to the limit", async () => {
    const { store } = await h.fresh();
    const old = await keyOf(store);
    const young = await keyOf(store);
    const silent = await keyOf(store, false);
    const revoked = await keyOf(store);
    const noticed = await keyOf(store);
    await store.clients.update(revoked.clientId, { revokedAt: NOW });
    for (const [key, at] of [
      [young, NOW + 20],
      [old, NOW + 10],
      [silent, NOW],
      [revoked, NOW],
      [noticed, NOW],
    ] as const)
      await store.keyHealth.recordFailure(key, at, "HTTP 500");
    await store.keyHealth.markNoticed(noticed, NOW, NOW + 1);
    expect((await store.keyHealth.dueForNotice(NOW + 20, 10)).map((r) => r.clientId)).toEqual([
      old.clientId,
      young.clientId,
    ]);
    expect((await store.keyHealth.dueForNotice(NOW + 19, 10)).map((r) => r.clientId)).toEqual([old.clientId]);
    expect((await store.keyHealth.dueForNotice(NOW + 20, 1)).map((r) => r.host)).toEqual([old.host]);
    expect(await store.keyHealth.dueForNotice(NOW + 9, 10)).toEqual([]);
  });

  it("markNoticed marks only the run that began at failingSince, once", async () => {
    const store = await h.shared();
    const key = await keyOf(store);
    expect(await store.keyHealth.markNoticed(key, NOW, NOW + 1)).toBe(false);
    await store.keyHealth.recordFailure(key, NOW, "HTTP 500");
    expect(await store.keyHealth.markNoticed(key, NOW - 1, NOW + 1)).toBe(false);
    expect(await store.keyHealth.markNoticed(key, NOW, NOW + 1)).toBe(true);
    expect(await store.keyHealth.markNoticed(key, NOW, NOW + 2)).toBe(false);
    expect((await store.keyHealth.failingOf(key.clientId))[0]!.noticeSentAt).toBe(NOW + 1);
  });

  it("concurrent failures of a new key, from 3 processes: one run, every attempt counted", async () => {
    const { store, another } = await h.fresh();
    const key = await keyOf(store);
    const others = [store, await another(), await another()];
    await Promise.all(
      Array.from({ length: 21 }, (_, i) => others[i % 3]!.keyHealth.recordFailure(key, NOW + i, `HTTP 50${i % 4}`)),
    );
    const [run] = await store.keyHealth.failingOf(key.clientId);
    expect(run!.failedAttempts).toBe(21);
    expect(run!.failingSince).toBeGreaterThanOrEqual(NOW);
    expect(run!.failingSince).toBeLessThan(NOW + 21);
  });

  it("concurrent notices and 2xx of one run, from 3 processes: noticed once, ended once", async () => {
    const { store, another } = await h.fresh();
    const key = await keyOf(store);
    const others = [store, await another(), await another()];
    await store.keyHealth.recordFailure(key, NOW, "HTTP 500");
    const marks = await Promise.all(
      Array.from({ length: 9 }, (_, i) => others[i % 3]!.keyHealth.markNoticed(key, NOW, NOW + 1 + i)),
    );
    expect(marks.filter(Boolean)).toHaveLength(1);
    const ends = await Promise.all(
      Array.from({ length: 9 }, (_, i) => others[i % 3]!.keyHealth.recordSuccess(key, NOW + 100 + i)),
    );
    expect(ends.filter((e) => e !== null)).toEqual([
      { failingSince: NOW, noticeSentAt: NOW + 1 + marks.indexOf(true) },
    ]);
  });
});

describe("KeyHealthStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "recordFailure(host)",
      roundTrip: true,
      run: async (s, v) => {
        const k = await keyOf(s);
        await s.keyHealth.recordFailure({ ...k, host: v }, NOW, null);
        return (await s.keyHealth.failingOf(k.clientId))[0]?.host;
      },
    },
    {
      op: "recordFailure(error)",
      roundTrip: true,
      run: async (s, v) => {
        const k = await keyOf(s);
        await s.keyHealth.recordFailure(k, NOW, v);
        return (await s.keyHealth.failingOf(k.clientId))[0]?.lastError;
      },
    },
    {
      op: "recordSuccess(host)",
      run: async (s, v) => s.keyHealth.recordSuccess({ ...(await keyOf(s)), host: v }, NOW),
    },
    {
      op: "markNoticed(host)",
      run: async (s, v) => s.keyHealth.markNoticed({ ...(await keyOf(s)), host: v }, NOW, NOW),
    },
    { op: "failingOf", run: (s, v) => s.keyHealth.failingOf(v) },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "recordFailure(now)",
      roundTrip: true,
      run: async (s, v) => {
        const k = await keyOf(s);
        await s.keyHealth.recordFailure(k, v, null);
        return (await s.keyHealth.failingOf(k.clientId))[0]?.failingSince;
      },
    },
    {
      op: "recordSuccess(now)",
      run: async (s, v) => {
        const k = await keyOf(s);
        await s.keyHealth.recordFailure(k, NOW, null);
        return s.keyHealth.recordSuccess(k, v);
      },
    },
    {
      op: "markNoticed(failingSince)",
      run: async (s, v) => {
        const k = await keyOf(s);
        await s.keyHealth.recordFailure(k, NOW, null);
        return s.keyHealth.markNoticed(k, v, NOW);
      },
    },
    { op: "dueForNotice(before)", run: async (s, v) => (await s.keyHealth.dueForNotice(v, 0)).length },
    { op: "dueForNotice(limit)", run: async (s, v) => (await s.keyHealth.dueForNotice(0, v)).length },
  ];
  suite.hostile(text, numbers);
});

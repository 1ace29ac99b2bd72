import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import type { NewNoticeRow } from "../../src/store/rows.js";
import { client, conformance, fresh, lease, NOW, seq, type Probe } from "../helpers/conformance.js";

/** NoticeStore conformance (checklist: store-conformance.md): operational notices and their outbox, on both drivers. */
const suite = conformance();

async function notice(store: Store, extra: Partial<NewNoticeRow> = {}): Promise<NewNoticeRow> {
  const row: NewNoticeRow = {
    id: fresh("evt_n"),
    clientId: extra.clientId ?? (await client(store)).id,
    type: "endpoint.failing",
    payload: '{"type":"endpoint.failing"}',
    url: "https://ops.example/n",
    deliveryStatus: "pending",
    nextAttemptAt: NOW,
    createdAt: NOW,
    ...extra,
  };
  await store.notices.insert(row);
  return row;
}

const claim = (store: Store, token: string, limit = 100, now = NOW) => store.notices.claimDue(lease(token, limit, now));

describe.each(suite.dialects)("NoticeStore on %s", (_name, h) => {
  it("insert and ofClient: the client's notices, newest first, up to the limit, with their defaults", async () => {
    const store = await h.shared();
    const first = await notice(store, { createdAt: NOW });
    const second = await notice(store, { clientId: first.clientId, createdAt: NOW + 1 });
    const listed = await store.notices.ofClient(first.clientId, 10);
    expect(listed.map((n) => n.id)).toEqual([second.id, first.id]);
    expect(listed[1]).toEqual({
      ...first,
      attempts: 0,
      claimedUntil: null,
      claimToken: null,
      lastStatusCode: null,
      lastError: null,
      deliveredAt: null,
    });
    expect((await store.notices.ofClient(first.clientId, 1)).map((n) => n.id)).toEqual([second.id]);
    expect(await store.notices.ofClient("cli_nobody", 10)).toEqual([]);
  });

  it("claimDue takes due, pending, unleased notices, oldest due first, under a lease and up to the limit", async () => {
    const { store } = await h.fresh();
    const late = await notice(store, { nextAttemptAt: NOW - 1 });
    const early = await notice(store, { nextAttemptAt: NOW - 2 });
    await notice(store, { nextAttemptAt: NOW + 1 });
    await notice(store, { deliveryStatus: "succeeded" });
    const [one] = await claim(store, "n:1", 1);
    expect(one).toMatchObject({ id: early.id, claimToken: "n:1", claimedUntil: NOW + 30_000 });
    expect((await claim(store, "n:2")).map((n) => n.id)).toEqual([late.id]);
    expect(await claim(store, "n:3")).toEqual([]);
    expect(await claim(store, "n:4", 0)).toEqual([]);
  });

  it("claimDue within each client's room: clients in turns, the ones left out skipped, a client's backlog never ahead of another's notice", async () => {
    const { store } = await h.fresh();
    const noisy = (await client(store)).id;
    const quiet = (await client(store)).id;
    const busy = (await client(store)).id;
    const backlog = [];
    for (let i = 0; i < 6; i++) backlog.push(await notice(store, { clientId: noisy, nextAttemptAt: NOW - 100 + i }));
    const other = await notice(store, { clientId: quiet, nextAttemptAt: NOW - 1 });
    await notice(store, { clientId: busy, nextAttemptAt: NOW - 200 });
    const asked: Array<[string, number]> = [];
    const room = (clientId: string, picked: ReadonlyMap<string, number>) => {
      asked.push([clientId, picked.get(clientId) ?? 0]);
      return clientId === noisy ? 2 - (picked.get(clientId) ?? 0) : 5;
    };
    const claimed = await store.notices.claimDue({ ...lease("n:fair", 3), excludeClients: [busy], clientRoom: room });
    // Oldest due first among what was picked; the noisy client within its room of 2, the quiet one's notice taken though it is the newest.
    expect(claimed.map((n) => n.id)).toEqual([backlog[0]!.id, backlog[1]!.id, other.id]);
    expect(claimed.every((n) => n.claimToken === "n:fair")).toBe(true);
    expect(asked.some(([id]) => id === busy)).toBe(false);
    // Without a room, the oldest due notices whoever's they are (the busy client's first).
    expect((await claim(store, "n:all", 1))[0]!.clientId).toBe(busy);
  });

  it("record writes the leased notice's new state and releases it; another token changes nothing", async () => {
    const { store } = await h.fresh();
    const row = await notice(store);
    await claim(store, "n:1");
    await store.notices.record(row.id, "n:other", { deliveryStatus: "failed" });
    await store.notices.record(row.id, "n:1", {
      deliveryStatus: "succeeded",
      attempts: 1,
      lastStatusCode: 204,
      deliveredAt: NOW,
    });
    expect((await store.notices.ofClient(row.clientId, 1))[0]).toMatchObject({
      deliveryStatus: "succeeded",
      attempts: 1,
      lastStatusCode: 204,
      deliveredAt: NOW,
      claimToken: null,
      claimedUntil: null,
    });
  });

  it("nextDueAt: the earliest pending notice's time, or its lease's end while it is leased; null with none pending", async () => {
    const { store } = await h.fresh();
    expect(await store.notices.nextDueAt(NOW)).toBeNull();
    const row = await notice(store, { nextAttemptAt: NOW + 5 });
    expect(await store.notices.nextDueAt(NOW)).toBe(NOW + 5);
    await claim(store, "n:1", 10, NOW + 5);
    expect(await store.notices.nextDueAt(NOW + 6)).toBe(NOW + 5 + 30_000);
    await store.notices.record(row.id, "n:1", { deliveryStatus: "succeeded" });
    expect(await store.notices.nextDueAt(NOW + 6)).toBeNull();
  });

  it("nextDueAt: a leased notice never hides an unleased one due before its lease ends (one client's hanging notices, another's retry)", async () => {
    const { store } = await h.fresh();
    await notice(store, { nextAttemptAt: NOW - 10 });
    await claim(store, "n:hanging", 10, NOW);
    await notice(store, { nextAttemptAt: NOW + 5_000 });
    // Before #30: the earliest pending notice's lease end (NOW + 30 s).
    expect(await store.notices.nextDueAt(NOW)).toBe(NOW + 5_000);
    expect(await store.notices.nextDueAt(NOW + 6_000)).toBe(NOW + 5_000);
  });

  it("prune removes settled notices created before `before`, one batch at a time; pending ones stay", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    for (const status of ["succeeded", "failed", "succeeded"] as const)
      await notice(store, { clientId: c.id, deliveryStatus: status, createdAt: NOW });
    const pending = await notice(store, { clientId: c.id, createdAt: NOW });
    const young = await notice(store, { clientId: c.id, deliveryStatus: "succeeded", createdAt: NOW + 10 });
    expect(await store.notices.prune(NOW + 10, 2)).toBe(2);
    expect(await store.notices.prune(NOW + 10, 2)).toBe(1);
    expect(await store.notices.prune(NOW + 10, 2)).toBe(0);
    expect((await store.notices.ofClient(c.id, 10)).map((n) => n.id)).toEqual([young.id, pending.id]);
  });

  it("two claimers in two processes at once never take the same notice, and together take them all", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    for (let i = 0; i < 20; i++) await notice(store, { clientId: c.id, nextAttemptAt: NOW - i });
    const other = await another();
    const [a, b] = await Promise.all([claim(store, "a:1", 12), claim(other, "b:1", 12)]);
    const ids = [...a!, ...b!].map((n) => n.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(store === other ? 20 : Math.min(20, 24));
  });

  it("a claimer that dies leaves its notice claimable again once the lease ends, and its late record is ignored", async () => {
    const { store } = await h.fresh();
    const row = await notice(store);
    await claim(store, "dead:1");
    expect(await claim(store, "live:1", 10, NOW + 30_000)).toEqual([]);
    const [again] = await claim(store, "live:1", 10, NOW + 30_001);
    expect(again).toMatchObject({ id: row.id, claimToken: "live:1" });
    await store.notices.record(row.id, "dead:1", { deliveryStatus: "failed" });
    expect((await store.notices.ofClient(row.clientId, 1))[0]).toMatchObject({
      deliveryStatus: "pending",
      claimToken: "live:1",
    });
  });
});

describe("NoticeStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "insert(payload)",
      roundTrip: true,
      run: async (s, v) => (await s.notices.ofClient((await notice(s, { payload: v })).clientId, 1))[0]?.payload,
    },
    {
      op: "insert(id)",
      roundTrip: true,
      run: async (s, v) => (await s.notices.ofClient((await notice(s, { id: v })).clientId, 1))[0]?.id,
    },
    { op: "record(id)", run: (s, v) => s.notices.record(v, "n:1", { deliveryStatus: "failed" }) },
    {
      op: "record(lastError)",
      roundTrip: true,
      run: async (s, v) => {
        const row = await claimedNotice(s);
        await s.notices.record(row.id, "n:mine", { lastError: v });
        return (await s.notices.ofClient(row.clientId, 1))[0]!.lastError;
      },
    },
    { op: "ofClient", run: (s, v) => s.notices.ofClient(v, 10) },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "insert(nextAttemptAt)",
      roundTrip: true,
      run: async (s, v) =>
        (await s.notices.ofClient((await notice(s, { nextAttemptAt: v })).clientId, 1))[0]?.nextAttemptAt,
    },
    { op: "ofClient(limit)", run: async (s, v) => (await s.notices.ofClient((await notice(s)).clientId, v)).length },
    {
      op: "nextDueAt(now)",
      global: true,
      run: async (s, v) => (await notice(s, { nextAttemptAt: NOW }), s.notices.nextDueAt(v)),
    },
    {
      op: "claimDue(now)",
      global: true,
      run: async (s, v) => (
        await notice(s, { nextAttemptAt: NOW }),
        (await s.notices.claimDue({ now: v, leaseMs: 0, token: "n:x", limit: 10 })).map((n) => n.nextAttemptAt)
      ),
    },
    {
      op: "claimDue(limit)",
      global: true,
      run: async (s, v) => (
        await notice(s), (await s.notices.claimDue({ now: NOW, leaseMs: 1, token: "n:x", limit: v })).length
      ),
    },
    {
      op: "prune(before)",
      global: true,
      run: async (s, v) => (await notice(s, { deliveryStatus: "failed" }), s.notices.prune(v, 10)),
    },
    {
      op: "prune(batch)",
      global: true,
      run: async (s, v) => (await notice(s, { deliveryStatus: "failed" }), s.notices.prune(NOW + 1, v)),
    },
  ];
  suite.hostile(text, numbers);
});

/** A notice claimed with the token "n:mine": due long before any other (each older than the last), so a claim at its time takes it alone. */
async function claimedNotice(store: Store): Promise<NewNoticeRow> {
  const row = await notice(store, { nextAttemptAt: -1e9 - seq() });
  const claimed = await store.notices.claimDue({ now: row.nextAttemptAt!, leaseMs: 60_000, token: "n:mine", limit: 1 });
  expect(claimed.map((n) => n.id)).toEqual([row.id]);
  return row;
}

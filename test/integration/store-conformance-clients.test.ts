import { describe, expect, it } from "vitest";
import { newClient } from "../../src/services/clients.js";
import { client, conformance, fresh, NOW, opts, task, type Probe } from "../helpers/conformance.js";
import { ADMITTED_GRANULARITY_MS } from "../../src/db/kit/task-claims.js";

/** ClientStore conformance (checklist: store-conformance.md): clients and their credit books, on both drivers. */
const suite = conformance();

const newRow = (extra: { creditLimit?: number; maxRunning?: number } = {}) =>
  newClient(NOW, { name: fresh("client"), ...extra }).row;

describe.each(suite.dialects)("ClientStore on %s", (_name, h) => {
  it("insert gives the row with its defaults; find, findByKeyHash and list read it back", async () => {
    const store = await h.shared();
    const row = newRow({ creditLimit: 500, maxRunning: 2 });
    const inserted = await store.clients.insert(row);
    expect(inserted).toMatchObject({
      ...row,
      pointsCharged: 0,
      pointsRefunded: 0,
      pointsReserved: 0,
      eventSeq: 0,
      lastAdmittedAt: 0,
      revokedAt: null,
      signatureScheme: "hmac",
      notificationUrl: null,
      previousSchemeExpiresAt: null,
    });
    expect(await store.clients.find(row.id)).toEqual(inserted);
    expect(await store.clients.findByKeyHash(row.apiKeyHash)).toEqual(inserted);
    expect(await store.clients.find("cli_nobody")).toBeUndefined();
    expect(await store.clients.findByKeyHash("0".repeat(64))).toBeUndefined();
    const listed = await store.clients.list();
    expect(listed.find((c) => c.id === row.id)).toEqual(inserted);
    expect(listed.map((c) => c.id)).toEqual(listed.map((c) => c.id).sort());
  });

  it("insert refuses a second client with the same key digest", async () => {
    const store = await h.shared();
    const row = newRow();
    await store.clients.insert(row);
    await expect(store.clients.insert({ ...newRow(), apiKeyHash: row.apiKeyHash })).rejects.toThrow();
  });

  it("update patches and returns the row; an unknown id gives undefined", async () => {
    const store = await h.shared();
    const c = await client(store);
    const updated = await store.clients.update(c.id, { notificationUrl: "https://ops.example/n", maxWaiting: 3 });
    expect(updated).toEqual({ ...c, notificationUrl: "https://ops.example/n", maxWaiting: 3 });
    expect(await store.clients.find(c.id)).toEqual(updated);
    expect(await store.clients.update("cli_nobody", { name: "x" })).toBeUndefined();
  });

  it("a switch of signature scheme stores its overlap's end in ms and reads it back; null clears it", async () => {
    const store = await h.shared();
    const c = await client(store);
    const end = NOW + 86_400_000;
    const switched = await store.clients.updateWith(c.id, () => ({
      patch: { signatureScheme: "ed25519", previousSchemeExpiresAt: end },
      result: null,
    }));
    expect(switched!.client).toEqual({ ...c, signatureScheme: "ed25519", previousSchemeExpiresAt: end });
    expect((await store.clients.find(c.id))!.previousSchemeExpiresAt).toBe(end);
    expect(await store.clients.update(c.id, { previousSchemeExpiresAt: null })).toMatchObject({
      previousSchemeExpiresAt: null,
    });
  });

  it("update with an empty patch returns the row unchanged", async () => {
    const store = await h.shared();
    const c = await client(store);
    expect(await store.clients.update(c.id, {})).toEqual(c);
  });

  it("updateWith reads the row and applies the change's patch in one step, returning its result", async () => {
    const store = await h.shared();
    const c = await client(store);
    const out = await store.clients.updateWith(c.id, (seen) => ({
      patch: { name: `${seen.name}!` },
      result: seen.name,
    }));
    expect(out).toEqual({ client: { ...c, name: `${c.name}!` }, result: c.name });
    // A change with nothing to write returns the row as it is.
    expect(await store.clients.updateWith(c.id, () => ({ patch: {}, result: 7 }))).toEqual({
      client: { ...c, name: `${c.name}!` },
      result: 7,
    });
    expect(await store.clients.updateWith("cli_nobody", () => ({ patch: { name: "x" }, result: 1 }))).toBeUndefined();
  });

  it("updateWith: 20 concurrent read-modify-writes lose none (each sees the one before)", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const others = [store, await another(), await another()];
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        others[i % 3]!.clients.updateWith(c.id, (seen) => ({
          patch: { maxWaiting: (seen.maxWaiting ?? 0) + 1 },
          result: null,
        })),
      ),
    );
    expect((await store.clients.find(c.id))!.maxWaiting).toBe(20);
  });

  it("updateWith: a change that throws writes nothing and the error reaches the caller", async () => {
    const store = await h.shared();
    const c = await client(store);
    await expect(
      store.clients.updateWith(c.id, () => {
        throw new Error("rotation failed midway");
      }),
    ).rejects.toThrow("rotation failed midway");
    expect(await store.clients.find(c.id)).toEqual(c);
  });

  it("markAdmitted sets when the client was last admitted", async () => {
    const store = await h.shared();
    const c = await client(store);
    await store.clients.markAdmitted(c.id, NOW + 42);
    expect((await store.clients.find(c.id))!.lastAdmittedAt).toBe(NOW + 42);
    await store.clients.markAdmitted("cli_nobody", NOW);
  });

  it("markAdmitted within ADMITTED_GRANULARITY_MS of this store's last mark of the client writes nothing", async () => {
    const store = await h.shared();
    const c = await client(store);
    await store.clients.markAdmitted(c.id, NOW);
    // Another writer's value: the statement's own condition would overwrite it; the memo does not ask.
    await store.clients.update(c.id, { lastAdmittedAt: 5 });
    await store.clients.markAdmitted(c.id, NOW + ADMITTED_GRANULARITY_MS - 1);
    expect((await store.clients.find(c.id))!.lastAdmittedAt).toBe(5);
    await store.clients.markAdmitted(c.id, NOW + ADMITTED_GRANULARITY_MS);
    expect((await store.clients.find(c.id))!.lastAdmittedAt).toBe(NOW + ADMITTED_GRANULARITY_MS);
  });

  it("creditPosition and ledger follow reservations, charges and refunds", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 1_000 });
    expect(await store.clients.creditPosition(c.id)).toEqual({
      charged: 0,
      refunded: 0,
      reserved: 0,
      limit: 1_000,
      revoked: false,
    });
    expect(await store.clients.creditPosition("cli_nobody")).toBeUndefined();
    const { task: a } = await store.tasks.create(task(c.id, fresh("a"), { reserve: 40 }));
    const { task: b } = await store.tasks.create(task(c.id, fresh("b"), { reserve: 60 }));
    expect((await store.clients.creditPosition(c.id))!.reserved).toBe(100);
    await store.tasks.transition(a, { status: "succeeded", phase: "done", pointsCharged: 35 }, opts(null, NOW + 1));
    const bDone = await store.tasks.transition(
      b,
      { status: "failed", phase: "done", pointsCharged: 60 },
      opts(null, NOW + 2),
    );
    await store.tasks.transition(bDone!, { pointsRefunded: 60 }, opts(null, NOW + 3));
    await store.clients.update(c.id, { revokedAt: NOW + 4 });
    expect(await store.clients.creditPosition(c.id)).toEqual({
      charged: 95,
      refunded: 60,
      reserved: 0,
      limit: 1_000,
      revoked: true,
    });
    expect(await store.clients.ledger(c.id)).toEqual([
      { taskId: a.id, charged: 35, refunded: 0, at: NOW + 1 },
      { taskId: b.id, charged: 60, refunded: 0, at: NOW + 2 },
      { taskId: b.id, charged: 0, refunded: 60, at: NOW + 3 },
    ]);
    expect(await store.clients.ledger("cli_nobody")).toEqual([]);
  });
});

describe("ClientStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    {
      op: "insert(name)",
      roundTrip: true,
      run: async (s, v) => (await s.clients.insert({ ...newRow(), name: v })).name,
    },
    {
      op: "insert(apiKeyHash)",
      roundTrip: true,
      run: async (s, v) =>
        (await s.clients.findByKeyHash((await s.clients.insert({ ...newRow(), apiKeyHash: v })).apiKeyHash))
          ?.apiKeyHash,
    },
    {
      op: "update(notificationUrl)",
      roundTrip: true,
      run: async (s, v) => (await s.clients.update((await client(s)).id, { notificationUrl: v }))!.notificationUrl,
    },
    { op: "find(id)", run: (s, v) => s.clients.find(v) },
    { op: "findByKeyHash", run: (s, v) => s.clients.findByKeyHash(v) },
    { op: "update(id)", run: (s, v) => s.clients.update(v, { name: "x" }) },
    { op: "updateWith(id)", run: (s, v) => s.clients.updateWith(v, () => ({ patch: { name: "x" }, result: 1 })) },
    { op: "markAdmitted(id)", run: (s, v) => s.clients.markAdmitted(v, NOW) },
    { op: "creditPosition(id)", run: (s, v) => s.clients.creditPosition(v) },
    { op: "ledger(id)", run: (s, v) => s.clients.ledger(v) },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "insert(creditLimit)",
      roundTrip: true,
      run: async (s, v) =>
        (await s.clients.find((await s.clients.insert({ ...newRow(), creditLimit: v })).id))!.creditLimit,
    },
    {
      op: "update(maxRunning)",
      roundTrip: true,
      run: async (s, v) => (await s.clients.update((await client(s)).id, { maxRunning: v }))!.maxRunning,
    },
    {
      op: "markAdmitted(at)",
      roundTrip: true,
      run: async (s, v) => {
        const c = await client(s);
        await s.clients.markAdmitted(c.id, v);
        return (await s.clients.find(c.id))!.lastAdmittedAt;
      },
    },
  ];
  suite.hostile(text, numbers);
});

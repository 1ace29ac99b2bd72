import { afterEach, describe, expect, it, vi } from "vitest";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { sqliteStore } from "../../src/open-store.js";
import {
  API_KEY_CACHE_MS,
  ApiKeyCache,
  createClient,
  revokeClient,
  updateClientLimits,
} from "../../src/services/clients.js";
import { ClientChanges } from "../../src/db/kit/client-changes.js";
import type { Store } from "../../src/store/store.js";
import type { ClientRow } from "../../src/store/rows.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startPair, type Instance } from "../helpers/pg-relays.js";
import { createTestRelay, imageBody, type TestRelay } from "../helpers/relay.js";

/**
 * API keys are cached per process (src/services/clients.ts, ApiKeyCache): a request with a known key
 * reads no client row, and a revocation or a change of limits is honoured at once here, at once
 * for the CLI beside a SQLite server, and on PostgreSQL as soon as the other instances hear the
 * notification (docs/contract.md, "Authentication").
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function relay(): TestRelay {
  const t = createTestRelay();
  cleanups.push(() => t.close());
  return t;
}

const create = (t: TestRelay, apiKey: string) =>
  t.request(apiKey, "/openapi/v1/images/generations", {
    method: "POST",
    json: imageBody(),
    idempotencyKey: `key-cache-${Math.random().toString(36).slice(2, 12)}`,
  });

describe("API key cache on SQLite", () => {
  it("a cached key reads no client row per request", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const reads = vi.spyOn(t.store.clients, "findByKeyHash");
    for (let i = 0; i < 20; i++) expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(200);
    expect((await create(t, apiKey)).status).toBe(201);
    expect(reads).toHaveBeenCalledTimes(1);
    // An unknown key is never kept: each one is looked up.
    for (let i = 0; i < 3; i++) expect((await t.request("grk_unknown", "/openapi/v1/tasks")).status).toBe(401);
    expect(reads).toHaveBeenCalledTimes(4);
  });

  it("a revocation and new limits made in this process are honoured by the next request", async () => {
    const t = relay();
    const a = t.client("a");
    const b = t.client("b");
    expect((await create(t, a.apiKey)).status).toBe(201);
    expect((await create(t, b.apiKey)).status).toBe(201);
    await updateClientLimits(t.relay.deps, b.id, { maxWaiting: 1 });
    const refused = await create(t, b.apiKey);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("concurrent_limit");
    await revokeClient(t.relay.deps, a.id);
    expect((await t.request(a.apiKey, "/openapi/v1/tasks")).status).toBe(401);
  });

  it("a change another process commits (the CLI's connection) is honoured by the next request", async () => {
    const t = relay();
    const { id, apiKey } = t.client();
    expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(200);
    const cli = sqliteStore(openDatabase(t.config.databasePath));
    try {
      await revokeClient({ store: cli, clock: t.clock, lifecycle: t.relay.lifecycle }, id);
    } finally {
      await cli.close();
    }
    expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(401);
  });
});

/** A store whose client reads are counted and whose changes the test makes by hand. */
function stubStore(client: ClientRow) {
  const changes = new ClientChanges();
  let row: ClientRow = client;
  let gate: Promise<void> | null = null;
  const findByKeyHash = vi.fn(async (hash: string) => {
    const seen = row;
    await gate;
    return hash === seen.apiKeyHash ? seen : undefined;
  });
  const store = { clients: { findByKeyHash, watch: changes.watch.bind(changes), pollChanges: () => {} } };
  return {
    store: store as unknown as Store,
    findByKeyHash,
    set: (next: ClientRow) => {
      row = next;
    },
    emit: (id: string | null) => changes.emit(id),
    hold: () => {
      let open!: () => void;
      gate = new Promise((r) => (open = r));
      return () => {
        gate = null;
        open();
      };
    },
  };
}

describe("ApiKeyCache", () => {
  async function oneClient() {
    const t = relay();
    const { id, apiKey } = t.client();
    return { apiKey, row: (await t.store.clients.find(id))! };
  }

  it("reads the row again after API_KEY_CACHE_MS when no change was heard (a lost notification)", async () => {
    const { apiKey, row } = await oneClient();
    const s = stubStore(row);
    const clock = new FakeClock();
    const cache = new ApiKeyCache({ store: s.store, clock });
    expect(await cache.authenticate(apiKey)).toMatchObject({ id: row.id });
    s.set({ ...row, revokedAt: clock.now() });
    clock.advance(API_KEY_CACHE_MS - 1);
    expect(await cache.authenticate(apiKey)).toMatchObject({ id: row.id });
    expect(s.findByKeyHash).toHaveBeenCalledTimes(1);
    clock.advance(1);
    expect(await cache.authenticate(apiKey)).toBeNull();
  });

  it("a lookup in flight when a change lands does not keep what it read", async () => {
    const { apiKey, row } = await oneClient();
    const s = stubStore(row);
    const cache = new ApiKeyCache({ store: s.store, clock: new FakeClock() });
    const open = s.hold();
    const pending = cache.authenticate(apiKey);
    s.set({ ...row, revokedAt: 1 });
    s.emit(row.id);
    open();
    expect(await pending).toMatchObject({ id: row.id });
    expect(cache.size).toBe(0);
    expect(await cache.authenticate(apiKey)).toBeNull();
  });

  it("holds at most `size` keys, dropping the oldest", async () => {
    const t = relay();
    const [a, b] = [t.client("a"), t.client("b")];
    const reads = vi.spyOn(t.store.clients, "findByKeyHash");
    const cache = new ApiKeyCache({ store: t.store, clock: t.clock }, { size: 1 });
    for (const key of [a.apiKey, a.apiKey, b.apiKey, b.apiKey, a.apiKey]) await cache.authenticate(key);
    expect(cache.size).toBe(1);
    expect(reads).toHaveBeenCalledTimes(3);
  });
});

describe("API key cache on PostgreSQL", () => {
  it("a key revoked on instance A is refused by instance B once B hears the notification", async () => {
    const { a, b, clock } = await startPair(cleanups);
    await b.relay.listen();
    const one = await createClient({ store: a.store, clock }, { name: "revoked" });
    const two = await createClient({ store: a.store, clock }, { name: "limited" });
    const call = (i: Instance, apiKey: string, path: string, init: RequestInit = {}) =>
      i.relay.app.request(`http://relay.test${path}`, {
        ...init,
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
      });
    const creation = (apiKey: string, n: number) =>
      call(b, apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `pg-key-cache-${n}` },
        body: JSON.stringify(imageBody()),
      });

    const reads = vi.spyOn(b.store.clients, "findByKeyHash");
    for (let i = 0; i < 10; i++) expect((await call(b, one.apiKey, "/openapi/v1/tasks")).status).toBe(200);
    expect((await creation(two.apiKey, 1)).status).toBe(201);
    expect(reads).toHaveBeenCalledTimes(2);

    /** Resolves when B hears that the client changed (another instance's NOTIFY). */
    const heard = (id: string) =>
      new Promise<void>((resolve) => {
        const stop = b.store.clients.watch((changed) => {
          if (changed !== id) return;
          stop();
          resolve();
        });
      });
    const started = Date.now();
    const revoked = heard(one.client.id);
    await revokeClient(a.relay.deps, one.client.id);
    await revoked;
    expect((await call(b, one.apiKey, "/openapi/v1/tasks")).status).toBe(401);

    const limited = heard(two.client.id);
    await updateClientLimits(a.relay.deps, two.client.id, { maxWaiting: 1 });
    await limited;
    expect((await creation(two.apiKey, 2)).status).toBe(429);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

import pg from "pg";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createClient } from "../../src/services/clients.js";
import { startInstances, type Instance } from "../helpers/pg-relays.js";

/**
 * The stored-bytes bound on three PostgreSQL instances (issue #43): creations spend room granted to
 * their own instance, so they never wait on a lock another instance's creations hold (the client's
 * client_storage row, which every batch used to update), and a burst spread over the three still
 * stops exactly at the bound.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup() {
  const { db, clock, instances, stop } = await startInstances(3, { CLIENT_MAX_STORED_BYTES: "1MiB" });
  cleanups.push(stop);
  let keys = 0;
  const create = (i: Instance, apiKey: string, prompt: string) =>
    i.relay.app.request("http://relay.test/openapi/v1/images/generations", {
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "idempotency-key": `storage-bound-${String(keys++).padStart(4, "0")}`,
      },
      body: JSON.stringify({ model: "p-image", mode: "generate", prompt, count: 1 }),
    });
  const client = async (name: string) => {
    const { client: c, apiKey } = await createClient({ store: instances[0]!.store, clock }, { name });
    return { id: c.id, apiKey };
  };
  return { db, instances, create, client };
}

/** Rejects when `work` is not done within `ms`: what a creation waiting on a held lock would do. */
function within<T>(ms: number, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not done within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

describe("the stored-bytes bound on three PostgreSQL instances", () => {
  it("creations on three instances go on while the client's client_storage row is locked: none waits on it", async () => {
    const { db, instances, create, client } = await setup();
    const c = await client("busy");
    // Each instance's first creation is granted room (under the row's lock, once).
    for (const i of instances) {
      const res = await create(i, c.apiKey, "warm up");
      expect(res.status, await res.clone().text()).toBe(201);
    }
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    cleanups.push(() => locker.end());
    await locker.query("BEGIN");
    await locker.query("SELECT * FROM client_storage WHERE client_id = $1 FOR UPDATE", [c.id]);
    try {
      const answers = await within(
        20_000,
        Promise.all(Array.from({ length: 30 }, (_, n) => create(instances[n % 3]!, c.apiKey, `task ${n}`))),
      );
      expect(answers.map((r) => r.status)).toEqual(Array(30).fill(201));
    } finally {
      await locker.query("ROLLBACK");
    }
    expect(await instances[1]!.store.tasks.storedBytesOfClient(c.id)).toBe(
      Number((await locker.query("SELECT sum(stored_bytes) AS n FROM tasks WHERE client_id = $1", [c.id])).rows[0].n),
    );
  });

  it("a burst spread over three instances stops exactly at the bound, 429 storage_limit past it", async () => {
    const { instances, create, client } = await setup();
    const big = "漢".repeat(32_768);
    const first = await client("first");
    expect((await create(instances[0]!, first.apiKey, big)).status).toBe(201);
    const perTask = await instances[0]!.store.tasks.storedBytesOfClient(first.id);
    expect(perTask).toBeGreaterThan(3 * 32_768);
    const fits = Math.floor((1024 * 1024) / perTask);

    const burst = await client("burst");
    const answers = await Promise.all(
      Array.from({ length: fits + 9 }, (_, n) => create(instances[n % 3]!, burst.apiKey, big)),
    );
    expect(answers.filter((r) => r.status === 201)).toHaveLength(fits);
    const refused = answers.filter((r) => r.status !== 201);
    expect(refused.map((r) => r.status)).toEqual(Array(9).fill(429));
    const body = (await refused[0]!.json()) as { error: Record<string, unknown> };
    expect(body).toEqual({
      error: {
        code: "storage_limit",
        message: `Your tasks store ${fits * perTask} bytes; this one (${perTask}) would pass your limit of ${1024 * 1024}. Finished tasks are removed after the retention period; retry then, or ask the operator for a higher CLIENT_MAX_STORED_BYTES.`,
        request_id: expect.stringMatching(/^req_/),
      },
    });
    for (const i of instances) expect(await i.store.tasks.storedBytesOfClient(burst.id)).toBe(fits * perTask);
    // Another client, with room of its own, is not affected.
    expect((await create(instances[2]!, first.apiKey, "small")).status).toBe(201);
  });

  it("creations of one instance go on while its own grant row is held FOR NO KEY UPDATE: they only share-lock it", async () => {
    const { db, instances, create, client } = await setup();
    const c = await client("own-row");
    const [one] = instances;
    expect((await create(one!, c.apiKey, "warm up")).status).toBe(201);
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    cleanups.push(() => locker.end());
    await locker.query("BEGIN");
    // What a batch spending from the row used to take (an UPDATE): every other batch of the instance waited for it.
    const held = await locker.query(
      "SELECT allowance FROM client_storage_grants WHERE client_id = $1 AND holder = $2 FOR NO KEY UPDATE",
      [c.id, one!.store.grants.holder],
    );
    expect(held.rows).toHaveLength(1);
    try {
      const answers = await within(
        20_000,
        Promise.all(Array.from({ length: 20 }, (_, n) => create(one!, c.apiKey, `task ${n}`))),
      );
      expect(answers.map((r) => r.status)).toEqual(Array(20).fill(201));
    } finally {
      await locker.query("ROLLBACK");
    }
  });

  it("a burst on an instance with no grant yet asks for room once, not once per creation", async () => {
    const { instances, create, client } = await setup();
    const c = await client("herd");
    const grants = instances[0]!.store.grants;
    const refill = vi.spyOn(grants as unknown as { refill: () => Promise<boolean> }, "refill");
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, n) => create(instances[0]!, c.apiKey, `task ${n}`)),
    );
    expect(answers.map((r) => r.status)).toEqual(Array(40).fill(201));
    expect(refill).toHaveBeenCalledTimes(1);
  });

  it("with grants held and spent on every instance, a burst of small tasks still stops exactly at the bound", async () => {
    const { instances, create, client } = await setup();
    const prompt = "漢".repeat(4_000);
    const c = await client("small-burst");
    // Each instance holds a grant, partly spent and not settled yet.
    for (const i of instances) expect((await create(i, c.apiKey, prompt)).status).toBe(201);
    const perTask = (await instances[0]!.store.tasks.storedBytesOfClient(c.id)) / 3;
    const fits = Math.floor((1024 * 1024) / perTask) - 3;
    const answers = await Promise.all(
      Array.from({ length: fits + 12 }, (_, n) => create(instances[n % 3]!, c.apiKey, prompt)),
    );
    expect(answers.filter((r) => r.status === 201)).toHaveLength(fits);
    expect(answers.filter((r) => r.status !== 201).map((r) => r.status)).toEqual(Array(12).fill(429));
    for (const i of instances) expect(await i.store.tasks.storedBytesOfClient(c.id)).toBe((fits + 3) * perTask);
  });
});

import { afterEach, describe, expect, it, vi } from "vitest";
import { createClient } from "../../src/services/clients.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { crash, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { imageBody } from "../helpers/relay.js";
import { SseReader } from "../helpers/sse.js";

/**
 * Live progress across instances (docs/contract.md, "Live progress"): a stream open on one
 * instance is woken by a transition another instance records, through the PostgreSQL notification
 * held waits use, and reads nothing while nothing happens.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * Counts every call instance `i` makes of its store's task, event, account and client reads and
 * writes (what a stream could read); the store's own housekeeping timers (storage accounting) aside.
 */
function countQueries(i: Instance): { readonly count: number; reset(): void } {
  let count = 0;
  for (const area of [i.store.tasks, i.store.events, i.store.accounts, i.store.clients] as unknown as Record<
    string,
    unknown
  >[]) {
    for (const [name, fn] of Object.entries(area)) {
      if (typeof fn !== "function") continue;
      area[name] = (...args: unknown[]) => {
        count++;
        return (fn as (...a: unknown[]) => unknown).apply(area, args);
      };
    }
  }
  return {
    get count() {
      return count;
    },
    reset() {
      count = 0;
    },
  };
}

async function twoInstances() {
  const db = await freshPgDatabase();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const instances: Instance[] = [];
  cleanups.push(async () => {
    for (const i of instances) {
      i.relay.releaseWaits();
      if (i.alive) await crash(i);
    }
    await db.drop();
  });
  for (let n = 0; n < 2; n++) instances.push(await startInstance(db.url, clock, upstream.fetch));
  const [a, b] = instances as [Instance, Instance];
  await a.relay.listen();
  const { apiKey } = await createClient({ store: a.store, clock }, { name: "pg-streams" });
  const call = (i: Instance, path: string, init: RequestInit = {}) =>
    Promise.resolve(
      i.relay.app.request(`http://relay.test${path}`, {
        ...init,
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
      }),
    );
  let keys = 0;
  const create = async (i: Instance) => {
    const res = await call(i, "/openapi/v1/images/generations", {
      method: "POST",
      headers: { "idempotency-key": `pg-stream-${keys++}` },
      body: JSON.stringify(imageBody()),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as Json).data.id as string;
  };
  const open = async (i: Instance, path: string) => {
    const res = await call(i, path);
    expect(res.status).toBe(200);
    const reader = new SseReader(res);
    cleanups.push(() => reader.cancel());
    return reader;
  };
  return { a, b, call, create, open };
}

/** Two instances, a task created on A, and A's stream of that task and of all events, both parked (waiting). */
async function twoParkedStreams() {
  const { a, b, call, create, open } = await twoInstances();
  const id = await create(a);
  const task = await open(a, `/openapi/v1/tasks/${id}/events`);
  const all = await open(a, "/openapi/v1/events/stream");
  expect((await task.next())?.event).toBe("task.progress");
  await vi.waitFor(() => expect(a.relay.streams.parked).toBe(2));
  return { a, b, call, id, task, all };
}

describe("event streams on PostgreSQL", () => {
  it("a stream on one instance sees another's transition within 2 s, and reads nothing while idle", async () => {
    const { a, b, call, id, task, all } = await twoParkedStreams();
    // Both streams wait: for 1.5 s, instance A sends not one statement.
    const queries = countQueries(a);
    await new Promise((r) => setTimeout(r, 1_500));
    expect(queries.count).toBe(0);

    const started = Date.now();
    expect((await call(b, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
    const ended = await task.rest();
    const seen = Date.now() - started;
    expect(ended.map((e) => e.event)).toEqual(["task.canceled"]);
    expect(seen).toBeLessThan(2_000);
    const fromFeed = (await all.next())!;
    expect(fromFeed.id).toBe(ended[0]!.id);
    expect(Date.now() - started).toBeLessThan(2_000);
    // Woken, the streams read what changed and nothing more.
    expect(queries.count).toBeGreaterThan(0);
    expect(queries.count).toBeLessThan(12);
  });

  it("a lost LISTEN session loses no event: the streams read again once it is back", async () => {
    const { a, b, call, id, task, all } = await twoParkedStreams();
    // The LISTEN session dies on the server's side; the transition is recorded while no one listens.
    const listener = a.store.listener!;
    await b.store.q("SELECT pg_terminate_backend($1)", [(listener as unknown as { processID: number }).processID]);
    await vi.waitFor(() => expect(a.store.listener).not.toBe(listener), { timeout: 4_000, interval: 2 });
    expect((await call(b, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
    const ended = (await task.rest()).filter((e) => e.event !== "task.progress");
    expect(ended.map((e) => e.event)).toEqual(["task.canceled"]);
    expect((await all.next())?.id).toBe(ended[0]!.id);
  });
});

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { PgStore } from "../../src/db/pg/store.js";
import { pgStore } from "../../src/open-store.js";
import { createClient } from "../../src/services/clients.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startReplica, type PgNode, type PgReplica } from "../helpers/pg-replica.js";
import { callAs, crash, round, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { type Answer, startReceiver } from "../helpers/receiver.js";
import { imageBody } from "../helpers/relay.js";

/**
 * PostgreSQL failover (docs/operations.md, "PostgreSQL failover"): two real servers in streaming
 * replication, the standby synchronous, and two relay instances on the multi-host DATABASE_URL
 * (`h1,h2/…?target_session_attrs=read-write`). The relays' workers run on a fake clock against the
 * in-memory simulator; the database, its failover and the relays' connections are real.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function setup() {
  const replica: PgReplica = await startReplica();
  cleanups.push(() => replica.close());
  await (await pgStore(replica.url, { max: 1 })).close(); // migrates, on the writable host
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const receiver = await startReceiver();
  const instances: Instance[] = [];
  cleanups.push(async () => {
    for (const i of instances) if (i.alive) await crash(i);
    await receiver.close();
  });
  for (let n = 0; n < 2; n++) instances.push(await startInstance(replica.url, clock, upstream.fetch));
  for (const i of instances) await i.relay.listen();
  const { apiKey } = await createClient({ store: instances[0]!.store, clock }, { name: "failover" });
  return { replica, clock, upstream, receiver, instances, call: callAs(apiKey) };
}

/** The ids among `ids` stored on one server. */
async function storedOn(replica: PgReplica, node: PgNode, ids: string[]): Promise<Set<string>> {
  const c = new pg.Client({ connectionString: replica.urlOf(node) });
  await c.connect();
  try {
    return new Set((await c.query("SELECT id FROM tasks WHERE id = ANY($1)", [ids])).rows.map((r) => r.id as string));
  } finally {
    await c.end();
  }
}

const STORAGE_UNAVAILABLE = {
  code: "storage_unavailable",
  message: "The relay cannot store changes right now (storage full or failing); nothing was changed. Retry later.",
};

const writableOf = (i: Instance) => (i.store as PgStore).options.hosts?.writableHost?.port;

describe("PostgreSQL failover (two servers, synchronous standby)", () => {
  it("kill -9 of the primary under load, standby promoted: every 201 exists, one upstream creation per task, every webhook delivered, held waits answer", async () => {
    const { replica, clock, upstream, receiver, instances, call } = await setup();
    const [a, b] = instances as [Instance, Instance];
    const ids: string[] = [];
    let n = 0;
    let unavailable = 0;
    let firstAfterPromotion: number | null = null;
    let promotedAt: number | null = null;
    const create = async () => {
      const i = instances[n % 2]!;
      const res = await call(i, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `failover-${n++}` },
        body: JSON.stringify({ ...imageBody(), callback_url: receiver.url("/hook") }),
      });
      if (res.status === 201) {
        ids.push(((await res.json()) as Json).data.id as string);
        if (promotedAt !== null) firstAfterPromotion ??= performance.now();
      } else {
        expect(res.status, await res.clone().text()).toBe(503);
        expect(((await res.json()) as Json).error.code).toBe("storage_unavailable");
        expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
        unavailable++;
      }
    };
    const rounds = async (count: number) => {
      for (let k = 0; k < count; k++) {
        await round(instances).catch(() => {});
        clock.advance(1_000);
      }
    };

    for (let k = 0; k < 20; k++) await create();
    await rounds(3);
    // A wait held on instance a across the failover: answered once its task changes.
    const waitedId = ids.at(-1)!;
    const held = call(a, `/openapi/v1/tasks/${waitedId}?status=queued`, { headers: { Prefer: "wait=60" } });

    replica.kill9(replica.primary);
    const load = (async () => {
      while (firstAfterPromotion === null || ids.length < 40) {
        await create();
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    await new Promise((r) => setTimeout(r, 1_000));
    await replica.promote(replica.standby);
    promotedAt = performance.now();
    await load;
    const toFirst201 = firstAfterPromotion! - promotedAt;

    // Work goes on until every acknowledged task's webhook has arrived.
    let firstWebhook: number | null = null;
    const before = receiver.requests.length;
    const delivered = () =>
      new Set(receiver.requests.filter((r) => r.json.type === "task.succeeded").map((r) => r.json.data.id as string));
    for (let step = 0; step < 120 && delivered().size < ids.length; step++) {
      await rounds(1);
      if (firstWebhook === null && receiver.requests.length > before) firstWebhook = performance.now();
      await new Promise((r) => setTimeout(r, 20));
    }

    expect(await storedOn(replica, replica.standby, ids)).toEqual(new Set(ids));
    expect(delivered()).toEqual(new Set(ids));
    for (const r of receiver.requests) expect(r.headers["webhook-id"]).toMatch(/^evt_/);
    expect(new Set(upstream.log.creates).size).toBe(upstream.log.creates.length);
    expect(upstream.log.creates).toHaveLength(ids.length);
    // The held wait answers: its task's change, or (its re-read falling in the outage) a 503 to retry.
    const heldAnswer = await held;
    const answered = (await heldAnswer.json()) as Json;
    if (heldAnswer.status === 503) {
      expect(answered).toEqual({ error: { ...STORAGE_UNAVAILABLE, request_id: expect.stringMatching(/^req_/) } });
      expect(heldAnswer.headers.get("retry-after")).toMatch(/^\d+$/);
    } else {
      expect(heldAnswer.status, JSON.stringify(answered)).toBe(200);
      expect(answered.data.status).not.toBe("queued");
    }
    expect([writableOf(a), writableOf(b)]).toEqual([replica.standby.port, replica.standby.port]);
    console.log(
      `failover: promotion→first 201 ${Math.round(toFirst201)} ms, promotion→first webhook ${Math.round(firstWebhook! - promotedAt)} ms, 503s ${unavailable}, tasks ${ids.length}, upstream creations ${upstream.log.creates.length}`,
    );
  }, 120_000);

  it("a failover in the middle of a fan-out to endpoints: every endpoint gets every task's event, under one webhook-id per pair", async () => {
    const { replica, clock, instances, call, receiver } = await setup();
    const [a] = instances as [Instance, Instance];
    const ENDPOINTS = 8;
    const TASKS = 4;
    for (let k = 0; k < ENDPOINTS; k++) {
      const res = await call(a, "/openapi/v1/webhooks/endpoints", {
        method: "POST",
        body: JSON.stringify({ url: receiver.url(`/ep${k}`) }),
      });
      expect(res.status, await res.clone().text()).toBe(201);
    }
    // The first attempts fail, so the fan-out is still under way (retries due) when the primary dies.
    const failing: Answer = (_req, res) => {
      res.statusCode = 500;
      res.end("not yet");
    };
    receiver.answers.push(...Array.from({ length: ENDPOINTS * 2 }, () => failing));
    const ids: string[] = [];
    for (let k = 0; k < TASKS; k++) {
      const res = await call(a, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `fanout-${k}` },
        body: JSON.stringify(imageBody()),
      });
      expect(res.status, await res.clone().text()).toBe(201);
      ids.push(((await res.json()) as Json).data.id as string);
    }
    const succeeded = () => receiver.requests.filter((r) => r.json.type === "task.succeeded");
    const pairs = () => new Set(succeeded().map((r) => `${new URL(r.url, "http://x").pathname} ${r.json.data.id}`));
    for (let step = 0; step < 60 && succeeded().length < ENDPOINTS; step++) {
      await round(instances).catch(() => {});
      clock.advance(1_000);
    }
    const beforeFailover = pairs().size;
    expect(beforeFailover).toBeLessThan(ENDPOINTS * TASKS);

    replica.kill9(replica.primary);
    await new Promise((r) => setTimeout(r, 500));
    await replica.promote(replica.standby);
    for (let step = 0; step < 240 && pairs().size < ENDPOINTS * TASKS; step++) {
      await round(instances).catch(() => {});
      clock.advance(5_000);
      await new Promise((r) => setTimeout(r, 10));
    }

    const expected = new Set(ids.flatMap((id) => Array.from({ length: ENDPOINTS }, (_, k) => `/ep${k} ${id}`)));
    expect(pairs()).toEqual(expected);
    // At least once, and every copy of one endpoint's event under the same webhook-id.
    const idsOfPair = new Map<string, Set<string>>();
    for (const r of succeeded()) {
      const key = `${new URL(r.url, "http://x").pathname} ${r.json.data.id}`;
      idsOfPair.set(key, (idsOfPair.get(key) ?? new Set()).add(r.headers["webhook-id"]!));
    }
    for (const [key, webhookIds] of idsOfPair) expect([key, webhookIds.size]).toEqual([key, 1]);
    console.log(
      `failover fan-out: ${beforeFailover} of ${ENDPOINTS * TASKS} endpoint deliveries before the failover, ${succeeded().length} task.succeeded requests in all`,
    );
  }, 120_000);

  it("the standby promoted while the old primary still runs: every instance moves to the new timeline, nothing more is written to the old primary", async () => {
    const { replica, instances, call, receiver } = await setup();
    const [a] = instances as [Instance, Instance];
    await replica.promote(replica.standby);
    const deadline = performance.now() + 10_000;
    while (instances.some((i) => writableOf(i) !== replica.standby.port)) {
      if (performance.now() > deadline) throw new Error("the relays did not move to the promoted standby");
      await new Promise((r) => setTimeout(r, 50));
    }
    const res = await call(a, "/openapi/v1/images/generations", {
      method: "POST",
      headers: { "idempotency-key": "split-brain-1" },
      body: JSON.stringify({ ...imageBody(), callback_url: receiver.url("/hook") }),
    });
    expect(res.status, await res.clone().text()).toBe(201);
    const id = ((await res.json()) as Json).data.id as string;
    expect(await storedOn(replica, replica.standby, [id])).toEqual(new Set([id]));
    expect(await storedOn(replica, replica.primary, [id])).toEqual(new Set());
  }, 60_000);
});

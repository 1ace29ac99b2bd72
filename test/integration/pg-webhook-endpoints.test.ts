import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "../../src/services/clients.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { crash, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { startReceiver, status, verifyAt, type Receiver } from "../helpers/receiver.js";
import { imageBody } from "../helpers/relay.js";

/**
 * Endpoints on PostgreSQL (docs/contract.md, "Endpoints"), with two relay instances on one database:
 * endpoints made through one are delivered to by the other, each its own destination under the
 * event's one webhook-id. The SQLite side is webhook-endpoints.test.ts; the store's, on both,
 * store-conformance-webhook-endpoints.test.ts.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup() {
  const db = await freshPgDatabase();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const instances: Instance[] = [];
  const receivers: Receiver[] = [];
  cleanups.push(async () => {
    for (const i of instances) if (i.alive) await crash(i);
    for (const r of receivers) await r.close();
    await db.drop();
  });
  for (let n = 0; n < 2; n++) instances.push(await startInstance(db.url, clock, upstream.fetch));
  const [a, b] = instances as [Instance, Instance];
  const receiver = async (answer?: Parameters<typeof startReceiver>[0]) => {
    const r = await startReceiver(answer);
    receivers.push(r);
    return r;
  };
  const client = async (name: string) => {
    const { client: row, apiKey, webhookSecret } = await createClient({ store: a.store, clock }, { name });
    const call = (on: Instance, path: string, init: { method?: string; json?: unknown; key?: string } = {}) =>
      Promise.resolve(
        on.relay.app.request(`http://relay.test${path}`, {
          method: init.method ?? "GET",
          headers: {
            authorization: `Bearer ${apiKey}`,
            "content-type": "application/json",
            ...(init.key ? { "idempotency-key": init.key } : {}),
          },
          ...(init.json === undefined ? {} : { body: JSON.stringify(init.json) }),
        }),
      );
    return { id: row.id, apiKey, secret: webhookSecret, call };
  };
  /** A task of the client that fails (written through instance A's store, as the poller would). */
  const failedTask = async (c: Awaited<ReturnType<typeof client>>, extra: Record<string, unknown> = {}) => {
    const created = await c.call(a, "/openapi/v1/images/generations", {
      method: "POST",
      json: imageBody(extra),
      key: `k-${Math.random()}`,
    });
    expect(created.status).toBe(201);
    const id = ((await created.json()) as { data: { id: string } }).data.id;
    await a.store.tasks.transition(
      (await a.store.tasks.find(id))!,
      { status: "failed", phase: "done", completedAt: clock.now() },
      { now: clock.now(), token: null, firstAttemptDelayMs: 0 },
    );
    return id;
  };
  /** B's dispatcher until nothing is due, the clock past every retry in between. */
  const deliverAll = async () => {
    for (let n = 0; n < 8; n++) {
      await b.relay.dispatcher.runOnce();
      await b.relay.dispatcher.drain();
      clock.advance(60_000);
    }
  };
  return { clock, a, b, receiver, client, failedTask, deliverAll };
}

const posts = (r: Receiver) => r.requests.filter((q) => q.method === "POST");

describe("endpoints on PostgreSQL, two instances", () => {
  it("fan-out to two endpoints and the callback: one webhook-id, the same body and signature; the attempt log names each destination", async () => {
    const { clock, a, b, receiver, client, failedTask, deliverAll } = await setup();
    const c = await client("fan");
    const cb = await receiver();
    const one = await receiver();
    const two = await receiver();
    const made = [];
    for (const r of [one, two]) {
      const res = await c.call(a, "/openapi/v1/webhooks/endpoints", { method: "POST", json: { url: r.url("/ep") } });
      expect(res.status).toBe(201);
      made.push(((await res.json()) as { data: { id: string } }).data.id);
    }
    const listed = (await (await c.call(b, "/openapi/v1/webhooks/endpoints")).json()) as { data: { id: string }[] };
    expect(listed.data.map((e) => e.id)).toEqual(made);
    const id = await failedTask(c, { callback_url: cb.url("/cb") });
    const at = clock.now();
    await deliverAll();
    const [x, y, z] = [posts(cb)[0]!, posts(one)[0]!, posts(two)[0]!];
    for (const r of [y, z]) {
      expect(r.headers["webhook-id"]).toBe(x.headers["webhook-id"]);
      expect(r.body).toBe(x.body);
      expect(r.headers["webhook-signature"]).toBe(x.headers["webhook-signature"]);
      expect(verifyAt(c.secret, r, at)).toMatchObject({ type: "task.failed", data: { id } });
    }
    const log = (await (await c.call(a, `/openapi/v1/tasks/${id}/deliveries`)).json()) as {
      data: { destination: string; event_id: string }[];
    };
    expect(log.data.map((d) => [d.destination, d.event_id]).sort()).toEqual(
      [["callback", x.headers["webhook-id"]], ...made.map((e) => [e, x.headers["webhook-id"]])].sort(),
    );
  });

  it("filters, tenant isolation, delete ending pending deliveries, and 410 / abort ending one destination's retries", async () => {
    const { a, b, receiver, client, failedTask, deliverAll } = await setup();
    const owner = await client("owner");
    const other = await client("other");
    const successesOnly = await receiver();
    const gone = await receiver(status(410));
    const aborting = await receiver(status(503, { "webhook-delivery": "abort" }));
    const down = await receiver(status(503));
    const create = async (url: string, events?: string[]) => {
      const res = await owner.call(a, "/openapi/v1/webhooks/endpoints", {
        method: "POST",
        json: events ? { url, events } : { url },
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { data: { id: string } }).data.id;
    };
    await create(successesOnly.url(), ["task.succeeded"]);
    await create(gone.url());
    await create(aborting.url());
    const downId = await create(down.url());
    // The other client cannot read or delete the owner's endpoint, nor does its task reach any.
    expect((await other.call(b, `/openapi/v1/webhooks/endpoints/${downId}`)).status).toBe(404);
    expect((await other.call(b, `/openapi/v1/webhooks/endpoints/${downId}`, { method: "DELETE" })).status).toBe(404);
    await failedTask(other);

    await failedTask(owner);
    await b.relay.dispatcher.runOnce();
    await b.relay.dispatcher.drain();
    expect(posts(down)).toHaveLength(1);
    // Deleted through A while its delivery waits for a retry: no more attempts.
    expect((await owner.call(a, `/openapi/v1/webhooks/endpoints/${downId}`, { method: "DELETE" })).status).toBe(204);
    await deliverAll();
    expect(posts(successesOnly)).toEqual([]);
    expect(posts(gone)).toHaveLength(1);
    expect(posts(aborting)).toHaveLength(1);
    expect(posts(down)).toHaveLength(1);
    for (const r of [gone, aborting, down]) expect(posts(r).map((q) => q.json.data.id)).toHaveLength(1);
  });
  it("an endpoint deleted through A while B's attempt is in flight: the feed counts the attempt the log lists", async () => {
    const { a, b, receiver, client, failedTask, deliverAll } = await setup();
    const c = await client("deleter");
    const hook = await receiver();
    let answer = () => {};
    hook.answers.push((req, res) => {
      answer = () => status(503)(req, res);
    });
    const made = await c.call(a, "/openapi/v1/webhooks/endpoints", { method: "POST", json: { url: hook.url() } });
    const ep = ((await made.json()) as { data: { id: string } }).data.id;
    const id = await failedTask(c);
    const arrived = hook.next();
    const running = b.relay.dispatcher.runOnce();
    await arrived;
    expect((await c.call(a, `/openapi/v1/webhooks/endpoints/${ep}`, { method: "DELETE" })).status).toBe(204);
    answer();
    await running;
    await deliverAll();
    const log = (await (await c.call(a, `/openapi/v1/tasks/${id}/deliveries`)).json()) as {
      data: { destination: string; status_code: number | null }[];
    };
    expect(log.data.map((d) => [d.destination, d.status_code])).toEqual([[ep, 503]]);
    const feed = (await (await c.call(b, "/openapi/v1/events")).json()) as { data: { endpoints: unknown[] }[] };
    expect(feed.data.map((e) => e.endpoints)).toEqual([
      [{ endpoint_id: ep, status: "ended", attempts: 1, last_status_code: null }],
    ]);
  });
});

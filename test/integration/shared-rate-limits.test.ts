import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "../../src/services/clients.js";
import { destinationHost } from "../../src/webhooks/destination.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { crash, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { startReceiver, type Receiver } from "../helpers/receiver.js";
import { createTestRelay, imageBody } from "../helpers/relay.js";

/**
 * Per-client rate limits are counted in the database (docs/contract.md, "Limits hold across instances"): N relay instances on one
 * PostgreSQL allow a client what one relay does, the count outlives the instance that took it, and
 * POST /openapi/v1/deliveries/recover is limited like redeliver (issue #30, repros 10 and 11).
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const since = new Date(Date.UTC(2020, 0, 1)).toISOString();

describe("recover is rate-limited like redeliver", () => {
  it("the 11th recover in a minute is 429 rate_limit with Retry-After; other clients are not limited; the window moves on", async () => {
    const t = createTestRelay({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
    cleanups.push(() => t.close());
    const hammer = t.client("hammer");
    const calm = t.client("calm");
    const recover = (key: string) =>
      t.request(key, "/openapi/v1/deliveries/recover", { method: "POST", json: { since } });
    const codes: number[] = [];
    for (let i = 0; i < 10; i++) {
      codes.push((await recover(hammer.apiKey)).status);
      t.clock.advance(1_000);
    }
    expect(codes).toEqual(Array(10).fill(202));
    const limited = await recover(hammer.apiKey);
    expect(limited.status).toBe(429);
    // The first recover (10 s ago) leaves the one-minute window in 50 s.
    expect(limited.headers.get("retry-after")).toBe("50");
    expect(await limited.json()).toEqual({
      error: {
        code: "rate_limit",
        message: "At most 10 recovers a minute. Retry in 50 s.",
        request_id: expect.any(String),
      },
    });
    expect((await recover(calm.apiKey)).status).toBe(202);
    t.clock.advance(50_000);
    expect((await recover(hammer.apiKey)).status).toBe(202);
    expect((await recover(hammer.apiKey)).status).toBe(429);
  });
});

describe("rate limits hold across relay instances on one PostgreSQL", () => {
  async function setup() {
    const db = await freshPgDatabase();
    const clock = new FakeClock(Date.UTC(2026, 0, 1));
    const upstream = simulatedUpstream(clock);
    const receiver: Receiver = await startReceiver();
    const instances: Instance[] = [];
    cleanups.push(async () => {
      for (const i of instances) if (i.alive) await crash(i);
      await receiver.close();
      await db.drop();
    });
    const start = async () => {
      const i = await startInstance(db.url, clock, upstream.fetch);
      instances.push(i);
      return i;
    };
    for (let n = 0; n < 3; n++) await start();
    const { apiKey } = await createClient({ store: instances[0]!.store, clock }, { name: "hammer" });
    const request = (i: Instance, path: string, json?: unknown) =>
      Promise.resolve(
        i.relay.app.request(`http://relay.test${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
          ...(json === undefined ? {} : { body: JSON.stringify(json) }),
        }),
      );
    return { clock, receiver, instances, start, request, apiKey };
  }

  it("three relays give a client exactly the 10 redelivers, retry-nows, recovers and test pings a minute that one relay does; the count outlives its instance", async () => {
    const { clock, receiver, instances, start, request, apiKey } = await setup();
    // A task with an event to redeliver.
    const created = await instances[0]!.relay.app.request("http://relay.test/openapi/v1/images/generations", {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "idempotency-key": "limits-1" },
      body: JSON.stringify(imageBody({ callback_url: receiver.url("/hook") })),
    });
    expect(created.status).toBe(201);
    const taskId = ((await created.json()) as { data: { id: string } }).data.id;
    const store = instances[0]!.store;
    await store.tasks.transition(
      (await store.tasks.find(taskId))!,
      { status: "failed", phase: "done", completedAt: clock.now() },
      { now: clock.now(), token: null, firstAttemptDelayMs: 0 },
    );

    const host = encodeURIComponent(destinationHost(receiver.url("/hook")));
    const actions: Record<string, (i: Instance) => Promise<Response>> = {
      redeliver: (i) => request(i, `/openapi/v1/tasks/${taskId}/redeliver`),
      "retry-now": (i) => request(i, `/openapi/v1/webhooks/hosts/${host}/retry`),
      recover: (i) => request(i, "/openapi/v1/deliveries/recover", { since }),
      ping: (i) => request(i, "/openapi/v1/webhooks/test", { url: receiver.url("/ping") }),
    };
    for (const [action, call] of Object.entries(actions)) {
      // 30 calls in turn on the three instances: 10 pass in all, as on one relay.
      const codes: number[] = [];
      for (let n = 0; n < 30; n++) codes.push((await call(instances[n % 3]!)).status);
      expect(
        codes.filter((c) => c < 300),
        action,
      ).toHaveLength(10);
      expect(codes.slice(10), action).toEqual(Array(20).fill(429));
    }

    // The instance that took most of them dies; a new one started on the database still refuses.
    await crash(instances[0]!);
    const late = await start();
    for (const call of Object.values(actions)) expect((await call(late)).status).toBe(429);
    clock.advance(60_000);
    for (const call of Object.values(actions)) expect((await call(late)).status).toBeLessThan(300);
  });
});

import { afterEach, describe, expect, it, vi } from "vitest";
import { claimDue as claimDueEvents } from "../../src/db/sqlite/event-claims.js";
import {
  find as findEvent,
  attemptsOfTask as listTaskAttempts,
  nextDueAt as nextEventDueAt,
  update as updateEvent,
} from "../../src/db/sqlite/events.js";
import type { EventRow } from "../../src/store/rows.js";
import { silentLogger } from "../../src/logger.js";
import { destinationHost } from "../../src/webhooks/destination.js";
import { Dispatcher, MAX_PAYLOAD_BYTES } from "../../src/workers/dispatcher.js";
import { WorkerLoop } from "../../src/workers/loop.js";
import type { FakeClock } from "../helpers/fake-clock.js";
import {
  countingReceiver,
  startDispatcherLoop,
  succeed,
  succeededTasks,
  SystemClock,
  waitFor,
  type CountingReceiver,
} from "../helpers/delivery.js";
import { upstreamSuite, WORKER_TEST_ENV } from "../helpers/upstream-suite.js";
import { createTask, readTask } from "../helpers/flow.js";
import { hang, ok, status, type Answer } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";

/**
 * Receiver protection (issue 4): a per-host concurrency cap and a per-host circuit breaker, so one
 * slow or dead receiver cannot delay other clients' deliveries. Real loopback receivers, private
 * networks allowed.
 *
 * Events are written the way the poller writes them (transitionTask: the task's state change and its
 * outbox event in one transaction, then a nudge to the dispatcher), so these tests depend on the
 * dispatcher alone, not on poll timing.
 */

const suite = upstreamSuite({ ...WORKER_TEST_ENV, WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "4" });
afterEach(() => {
  vi.restoreAllMocks();
});

function setup(env: Record<string, string> = {}, opts: { clock?: FakeClock } = {}): TestRelay {
  return suite.setup(env, opts).t;
}

async function receiver(answer: Answer = ok): Promise<CountingReceiver> {
  return countingReceiver((fn) => suite.cleanup(fn), answer);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("receiver protection: a slow receiver does not delay other clients", () => {
  it("client B's webhooks arrive within their own latency while client A's receiver hangs", async () => {
    const t = setup({ WEBHOOK_TIMEOUT_MS: "2000", WEBHOOK_RETRY_SCHEDULE: "0s,1h" }, { clock: new SystemClock() });
    const slow = await receiver(hang);
    const fast = await receiver(ok);
    const a = t.client("a");
    const b = t.client("b");

    const bTasks: string[] = [];
    for (let i = 0; i < 25; i++) bTasks.push(await createTask(t, b.apiKey, { callback_url: fast.url() }));
    /** B's tasks finish one by one; returns each event's receive time minus its creation time. */
    const deliverB = async (ids: string[]): Promise<{ events: EventRow[]; latencies: number[] }> => {
      const events: EventRow[] = [];
      for (const id of ids) {
        events.push(succeed(t, id));
        await sleep(20);
      }
      await waitFor("B's deliveries", () => events.every((e) => fast.arrivals.has(e.id)));
      return { events, latencies: events.map((e) => fast.arrivals.get(e.id)! - e.createdAt) };
    };
    const summary = (ms: number[]) =>
      `max ${Math.max(...ms)}, median ${[...ms].sort((x, y) => x - y)[Math.floor(ms.length / 2)]} (${ms.join(",")})`;

    startDispatcherLoop(t);
    // B's own latency, with nothing else going on (after a few deliveries that warm up the connection and the code paths).
    await deliverB(bTasks.slice(0, 5));
    const baseline = await deliverB(bTasks.slice(5, 15));

    // A has far more due events than the whole dispatcher has slots (64): without the host cap
    // they would take every slot and B would wait for A's 2 s timeouts (see the control below).
    const aEvents = await succeededTasks(t, a.apiKey, slow.url(), 80);
    await waitFor("A's attempts to hang at the cap", () => slow.open() === 4);
    const aStartedAt = Date.now();
    const loaded = await deliverB(bTasks.slice(15));
    const doneAt = Date.now();

    // A's attempts were still hanging the whole time (the 2 s timeout had not struck yet).
    expect(doneAt - aStartedAt).toBeLessThan(2_000);
    expect(slow.open()).toBe(4);
    expect(Math.max(...loaded.latencies)).toBeLessThan(500);
    console.info(
      `slow receiver: B latency (ms) alone: ${summary(baseline.latencies)}; while A hangs: ${summary(loaded.latencies)}; A attempts hanging: ${slow.open()}`,
    );
    const bEvents = [...baseline.events, ...loaded.events];
    expect(fast.requests).toHaveLength(25);

    // A's saturated host was not claimed beyond its cap: no lease and no retry step spent on the rest.
    const aRows = aEvents.map((e) => findEvent(t.database.db, e.id)!);
    expect(aRows.filter((e) => e.claimToken !== null)).toHaveLength(4);
    expect(aRows.filter((e) => e.attempts === 0 && e.claimToken === null)).toHaveLength(76);
    expect(slow.requests).toHaveLength(4);
    await waitFor("B's attempts to be recorded", () =>
      bEvents.every((e) => findEvent(t.database.db, e.id)!.deliveryStatus === "succeeded"),
    );
  });

  it("without the host cap, the fair share alone still keeps a slot for B: A holds at most 64 less the reserve", async () => {
    const t = setup({ WEBHOOK_TIMEOUT_MS: "1000", WEBHOOK_RETRY_SCHEDULE: "0s,1h" }, { clock: new SystemClock() });
    const slow = await receiver(hang);
    const fast = await receiver(ok);
    const a = t.client("a");
    const b = t.client("b");
    await succeededTasks(t, a.apiKey, slow.url(), 70);
    const bTask = await createTask(t, b.apiKey, { callback_url: fast.url() });

    // The relay's own dispatcher stays stopped; this one has no useful cap.
    const uncapped = new Dispatcher({
      store: t.store,
      clock: t.clock,
      config: t.config,
      logger: silentLogger,
      sender: t.relay.sender,
      owner: t.relay.owner,
      maxPerHost: 1_000,
    });
    const loop = new WorkerLoop({
      name: "uncapped",
      clock: t.clock,
      logger: silentLogger,
      tick: () => uncapped.tick(),
    });
    uncapped.onSettled = () => loop.nudge();
    loop.start();
    suite.cleanup(async () => {
      await loop.stop();
      await uncapped.drain();
    });
    // Before the fair share, A took all 64 slots here and B waited for A's 1 s timeouts.
    await waitFor("A to take its share", () => uncapped.activeCount === 56);
    expect(uncapped.inFlightOf(a.id)).toBe(56);

    const event = succeed(t, bTask);
    loop.nudge();
    await waitFor("B's delivery", () => fast.arrivals.size === 1, 5_000);
    const latency = fast.arrivals.get(event.id)! - event.createdAt;
    console.info(`without the host cap: B latency ${latency} ms (A's timeout 1000 ms)`);
    expect(latency).toBeLessThan(500);
  });

  it("never more than 4 attempts in flight to one host; every event still gets delivered", async () => {
    const t = setup({ WEBHOOK_TIMEOUT_MS: "5000" }, { clock: new SystemClock() });
    // Held long enough that the 8 started together are open together, even on a loaded machine.
    const busy = await receiver((_req, res) => setTimeout(() => res.end("ok"), 400));
    const other = await receiver(ok);
    const a = t.client("a");
    const b = t.client("b");
    const aEvents = await succeededTasks(t, a.apiKey, busy.url(), 20);
    // Another client on the same receiver host has a cap of its own: one client's backlog never takes its slots.
    const bEvents = await succeededTasks(t, b.apiKey, busy.url("/other-path"), 6);
    const elsewhere = await succeededTasks(t, b.apiKey, other.url(), 3);

    startDispatcherLoop(t);
    await waitFor("every delivery", () => busy.arrivals.size === 26 && other.arrivals.size === 3, 15_000);
    await waitFor("the last attempts to be recorded", () => t.relay.dispatcher.activeCount === 0);

    expect(busy.maxOpen()).toBe(8);
    expect(t.relay.dispatcher.inFlightTo(`${a.id}|${destinationHost(busy.url())}`)).toBe(0);
    for (const e of [...aEvents, ...bEvents, ...elsewhere])
      expect(findEvent(t.database.db, e.id)).toMatchObject({ deliveryStatus: "succeeded", attempts: 1 });
  });
});

describe("receiver protection: circuit breaker per host", () => {
  it("opens after 5 consecutive failures, postpones the host's events without attempts, and a successful half-open trial closes it", async () => {
    const t = setup();
    const warn = vi.spyOn(silentLogger, "warn");
    const dead = await receiver(status(503));
    const healthy = await receiver(ok);
    const a = t.client("a");
    const b = t.client("b");
    const aEvents = await succeededTasks(t, a.apiKey, dead.url(), 10);
    const host = `${a.id}|${destinationHost(dead.url())}`;

    expect(await t.relay.dispatcher.runOnce()).toBe(4); // the host cap
    expect(t.relay.dispatcher.breakers.state(host)).toBe("closed");
    expect(await t.relay.dispatcher.runOnce()).toBe(4); // the 5th failure opens it; 3 were already in flight
    expect(t.relay.dispatcher.breakers.state(host)).toBe("open");
    const openedAt = t.clock.now();
    expect(dead.requests).toHaveLength(8);

    // While open: no attempt, however often the dispatcher runs. The first pause lasts until the
    // schedule's first retry is due at the latest (5 s + 20% jitter).
    for (let i = 0; i < 5; i++) {
      t.clock.advance(1_100);
      expect(await t.relay.dispatcher.runOnce()).toBe(0);
    }
    expect(dead.requests).toHaveLength(8);
    // Another client's host is unaffected.
    const bEvents = await succeededTasks(t, b.apiKey, healthy.url(), 2);
    expect(await t.relay.dispatcher.runOnce()).toBe(2);
    expect(bEvents.map((e) => findEvent(t.database.db, e.id)!.deliveryStatus)).toEqual(["succeeded", "succeeded"]);

    // The two events never attempted were postponed to the end of the cool-down, with no attempt recorded
    // and their retry schedule untouched.
    const untried = aEvents.map((e) => findEvent(t.database.db, e.id)!).filter((e) => e.attempts === 0);
    expect(untried).toHaveLength(2);
    for (const e of untried) {
      expect(e).toMatchObject({
        deliveryStatus: "pending",
        roundAttempts: 0,
        nextAttemptAt: openedAt + 6_000,
        lastError: null,
      });
      expect(listTaskAttempts(t.database.db, e.taskId)).toEqual([]);
    }
    // Said once per opening, not once per postponed event.
    const openings = warn.mock.calls.filter((c) => c[1] === "circuit open: deliveries to host paused");
    expect(openings).toHaveLength(1);
    expect(openings[0]![0]).toMatchObject({
      client_id: a.id,
      host: destinationHost(dead.url()),
      consecutive_failures: 5,
      cool_down_ms: 6_000,
      after_trial: false,
    });

    // Half-open: the receiver is back; exactly one trial goes, and its success closes the circuit.
    dead.setAnswer(ok);
    t.clock.set(openedAt + 6_000);
    expect(await t.relay.dispatcher.runOnce()).toBe(1);
    expect(dead.requests).toHaveLength(9);
    expect(t.relay.dispatcher.breakers.state(host)).toBe("closed");
    for (let i = 0; i < 3; i++) await t.relay.dispatcher.runOnce();
    const rows = aEvents.map((e) => findEvent(t.database.db, e.id)!);
    expect(rows.map((e) => e.deliveryStatus)).toEqual(Array(10).fill("succeeded"));
    // One attempt per event beyond the 8 failed ones: postponing cost none.
    expect(rows.reduce((n, e) => n + e.attempts, 0)).toBe(18);
  });

  it("a failed trial re-opens the circuit for twice as long", async () => {
    const t = setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1s,1s,1s,1s,1s,1s,1s" });
    const dead = await receiver(status(500));
    const a = t.client("a");
    await succeededTasks(t, a.apiKey, dead.url(), 5);
    const host = `${a.id}|${destinationHost(dead.url())}`;

    await t.relay.dispatcher.runOnce();
    await t.relay.dispatcher.runOnce();
    expect(dead.requests).toHaveLength(5);
    expect(t.relay.dispatcher.breakers.state(host)).toBe("open");

    // The first pause: the schedule's first retry (1 s) + 20%; then twice that.
    t.clock.advance(1_200);
    expect(await t.relay.dispatcher.runOnce()).toBe(1);
    expect(dead.requests).toHaveLength(6);
    expect(t.relay.dispatcher.breakers.state(host)).toBe("open");
    expect(t.relay.dispatcher.breakers.nextTrialAt()).toBe(t.clock.now() + 2_400);

    t.clock.advance(2_399);
    expect(await t.relay.dispatcher.runOnce()).toBe(0);
    t.clock.advance(1);
    dead.setAnswer(ok);
    expect(await t.relay.dispatcher.runOnce()).toBe(1);
    expect(t.relay.dispatcher.breakers.state(host)).toBe("closed");
  });

  it("4xx answers do not open the circuit (the receiver is up), timeouts do", async () => {
    const t = setup({ WEBHOOK_TIMEOUT_MS: "200" });
    const refusing = await receiver(status(400));
    const hanging = await receiver(hang);
    const a = t.client("a");
    await succeededTasks(t, a.apiKey, refusing.url(), 6);
    await succeededTasks(t, a.apiKey, hanging.url(), 5);
    await t.relay.dispatcher.runOnce();
    await t.relay.dispatcher.runOnce();
    expect(refusing.requests).toHaveLength(6);
    expect(t.relay.dispatcher.breakers.state(`${a.id}|${destinationHost(refusing.url())}`)).toBe("closed");
    expect(t.relay.dispatcher.breakers.state(`${a.id}|${destinationHost(hanging.url())}`)).toBe("open");
  });
});

describe("receiver protection: the claim's host filter", () => {
  it("leaves out exactly the excluded hosts' events, whatever their path, query, port spelling or address family", async () => {
    const t = setup();
    const client = t.client();
    const urls = [
      "https://hooks.example.com/a?x=1",
      "https://hooks.example.com:443/b",
      "http://hooks.example.com/c",
      "https://hooks.example.com:8443/d",
      "https://hooks.example.com.evil.test/e",
      "https://sub.hooks.example.com/f",
      "http://[::1]:4000/g",
      "http://[::1]:4001/h",
      "https://other.test/?q=https://hooks.example.com/",
    ];
    const events = await succeededTasks(t, client.apiKey, "https://placeholder.test/", urls.length);
    // Stored as intake stores them: normalised by the URL parser.
    events.forEach((e, i) => {
      updateEvent(t.database.db, e.id, {
        callbackUrl: new URL(urls[i]!).href,
        destinationHost: destinationHost(urls[i]!),
      });
    });

    const claimed = claimDueEvents(t.database.db, {
      now: t.clock.now(),
      leaseMs: 1_000,
      token: "test:1",
      limit: 100,
      excludeKeys: [`${client.id}|hooks.example.com:443`, `${client.id}|[::1]:4000`],
    });
    expect(claimed.map((e) => new URL(e.callbackUrl!).pathname).sort()).toEqual(["/", "/c", "/d", "/e", "/f", "/h"]);
    expect(
      nextEventDueAt(t.database.db, {
        now: t.clock.now(),
        excludeKeys: urls.map((u) => `${client.id}|${destinationHost(u)}`),
      }),
    ).toBeNull();
  });

  it("claims at most the host's room per host, looking past one host's backlog for the others", async () => {
    const t = setup();
    const client = t.client();
    const busy = await succeededTasks(t, client.apiKey, "https://busy.test/", 30);
    const quiet = await succeededTasks(t, client.apiKey, "https://quiet.test/", 3);
    const claimed = claimDueEvents(t.database.db, {
      now: t.clock.now(),
      leaseMs: 1_000,
      token: "test:1",
      limit: 10,
      keyRoom: (key) => (key === `${client.id}|busy.test:443` ? 2 : 4),
    });
    expect(claimed.map((e) => e.id).sort()).toEqual([...busy.slice(0, 2), ...quiet].map((e) => e.id).sort());
  });
});

describe("receiver protection: payload size", () => {
  it(`refuses to send a body over ${MAX_PAYLOAD_BYTES} bytes: a failed attempt with a clear error, delivery failed`, async () => {
    const t = setup();
    const r = await receiver(ok);
    const client = t.client();
    const [big, atLimit] = await succeededTasks(t, client.apiKey, r.url(), 2);
    // Bodies are built from task rows and carry URLs, so only a defensive bound: forge oversized ones.
    // The real body with a metadata value padded to the size (still a valid task.succeeded body).
    const padded = (event: EventRow, bytes: number) => {
      const body = JSON.parse(event.payload) as { data: { metadata: Record<string, string> | null } };
      body.data.metadata = { pad: "" };
      const base = JSON.stringify(body);
      return base.replace('"pad":""', `"pad":"${"x".repeat(bytes - Buffer.byteLength(base))}"`);
    };
    updateEvent(t.database.db, big!.id, { payload: padded(big!, MAX_PAYLOAD_BYTES + 1) });
    updateEvent(t.database.db, atLimit!.id, { payload: padded(atLimit!, MAX_PAYLOAD_BYTES) });

    expect(await t.relay.dispatcher.runOnce()).toBe(2);
    expect(r.requests.map((x) => x.headers["webhook-id"])).toEqual([atLimit!.id]);
    expect(Buffer.byteLength(r.requests[0]!.body)).toBe(MAX_PAYLOAD_BYTES);

    const view = await readTask(t, client.apiKey, big!.taskId);
    expect(view.data.callback.delivery).toMatchObject({ status: "failed", attempts: 1, last_status_code: null });
    const res = await t.request(client.apiKey, `/openapi/v1/tasks/${big!.taskId}/deliveries`);
    expect(((await res.json()) as { data: unknown[] }).data).toEqual([
      expect.objectContaining({
        event_id: big!.id,
        outcome: "failed",
        status_code: null,
        error: `payload too large: ${MAX_PAYLOAD_BYTES + 1} bytes, the limit is ${MAX_PAYLOAD_BYTES}; not sent`,
        response_body: null,
      }),
    ]);
    // No retry.
    t.clock.advance(24 * 60 * 60_000);
    expect(await t.relay.dispatcher.runOnce()).toBe(0);
  });
});

describe("tenant isolation in delivery", () => {
  it("an attacker's failing events on the victim's host never delay the victim's webhooks (breaker and cap are per client)", async () => {
    const t = setup();
    // One receiver host: the attacker's path answers 503, the victim's 200.
    const shared = await receiver((req, res) => {
      res.statusCode = req.url.startsWith("/attacker") ? 503 : 200;
      res.end();
    });
    const attacker = t.client("attacker");
    const victim = t.client("victim");
    await succeededTasks(t, attacker.apiKey, shared.url("/attacker"), 8);
    for (let i = 0; i < 3; i++) await t.relay.dispatcher.runOnce();
    const attackerKey = `${attacker.id}|${destinationHost(shared.url())}`;
    expect(t.relay.dispatcher.breakers.state(attackerKey)).toBe("open");
    const started = t.clock.now();
    const victimEvents = await succeededTasks(t, victim.apiKey, shared.url("/victim"), 3);
    // At once, on the same clock tick: no cool-down, no half-open trial shared with the attacker.
    await t.relay.dispatcher.runOnce();
    expect(t.clock.now()).toBe(started);
    for (const e of victimEvents)
      expect(findEvent(t.database.db, e.id)).toMatchObject({ deliveryStatus: "succeeded", attempts: 1 });
    expect(t.relay.dispatcher.breakers.state(`${victim.id}|${destinationHost(shared.url())}`)).toBe("closed");
    // The attacker's trial, when it comes, is drawn from its own events only.
    t.clock.advance(30_000);
    await t.relay.dispatcher.runOnce();
    const trial = shared.requests.at(-1)!;
    expect(trial.url.startsWith("/attacker")).toBe(true);
  });

  it("the claim never lists refused circuits: thousands of open ones cost the query nothing", async () => {
    const t = setup();
    const r = await receiver(ok);
    const client = t.client();
    const events = await succeededTasks(t, client.apiKey, r.url(), 3);
    // 20,000 open circuits of other clients' keys (more than SQLite's bound-variable limit).
    const breakers = t.relay.dispatcher.breakers;
    for (let i = 0; i < 20_000; i++) {
      const key = `cli_other${i}|dead-${i}.test:443`;
      for (let f = 0; f < 5; f++) breakers.record(breakers.acquire(key)!, "failure");
    }
    expect(breakers.state("cli_other0|dead-0.test:443")).toBe("open");
    expect(await t.relay.dispatcher.runOnce()).toBe(3);
    for (const e of events) expect(findEvent(t.database.db, e.id)!.deliveryStatus).toBe("succeeded");
  });
});

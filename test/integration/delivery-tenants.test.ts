import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it, vi } from "vitest";
import { find as findEvent } from "../../src/db/sqlite/events.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { sqliteStore } from "../../src/open-store.js";
import { rotateSecret } from "../../src/services/clients.js";
import type { EventRow } from "../../src/store/rows.js";
import { silentLogger } from "../../src/logger.js";
import { destinationHost } from "../../src/webhooks/destination.js";
import {
  countingReceiver,
  startDispatcherLoop,
  succeed,
  succeededTasks,
  SystemClock,
  waitFor,
  type CountingReceiver,
} from "../helpers/delivery.js";
import { createTask } from "../helpers/flow.js";
import { hang, ok, startReceiver, status, type Answer, type Received } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite, WORKER_TEST_ENV } from "../helpers/upstream-suite.js";

/**
 * Delivery that serves every tenant's real receivers (docs/contract.md, "Delivery to real receivers", issue #21): partly working
 * receivers get every webhook within their retry schedule's own time, a host that is down is paused
 * without spending its events' retries, a client's slow receivers hold at most its fair share of the
 * pool, and clients hear about failing endpoints. Real loopback receivers; a fake clock wherever the
 * scenario allows it.
 */
const suite = upstreamSuite(WORKER_TEST_ENV);
afterEach(() => {
  vi.restoreAllMocks();
});

const ONE_SECOND_SCHEDULE = "0s,1s,1s,1s,1s,1s,1s,1s";

async function receiver(answer: Answer = ok): Promise<CountingReceiver> {
  return countingReceiver((fn) => suite.cleanup(fn), answer);
}

/** Runs the dispatcher in fake time, `stepMs` at a time, until `done` or `untilMs` of fake time passed; returns the fake time taken. */
async function runFakeTime(t: TestRelay, stepMs: number, untilMs: number, done: () => boolean): Promise<number> {
  const start = t.clock.now();
  while (!done() && t.clock.now() - start <= untilMs) {
    while ((await t.relay.dispatcher.runOnce()) > 0);
    if (done()) break;
    t.clock.advance(stepMs);
  }
  return t.clock.now() - start;
}

const statuses = (t: TestRelay, events: EventRow[]) => events.map((e) => findEvent(t.database.db, e.id)!);

/** A small seeded generator (mulberry32), so "fails half of all requests at random" is the same run every time. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

describe("partly working receivers get every webhook within their retry schedule's own time", () => {
  it("a receiver that fails the first attempt of every webhook and takes the retry (a cold start): 40 webhooks, all delivered, two attempts each", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: ONE_SECOND_SCHEDULE });
    const seen = new Set<string>();
    const coldStart = await receiver((req, res) => {
      const id = req.headers["webhook-id"]!;
      res.statusCode = seen.has(id) ? 200 : 503;
      seen.add(id);
      res.end();
    });
    const c = t.client("cold");
    const events = await succeededTasks(t, c.apiKey, coldStart.url(), 40);

    const took = await runFakeTime(t, 100, 60_000, () =>
      statuses(t, events).every((e) => e.deliveryStatus === "succeeded"),
    );
    console.info(`cold-starting receiver: 40 webhooks delivered after ${took} ms of fake time`);
    // Before #21: the circuit opened after 5 first attempts, its trial was again a first attempt, and
    // after 60 s 37 of 40 were still pending.
    expect(statuses(t, events).map((e) => e.deliveryStatus)).toEqual(Array(40).fill("succeeded"));
    // The schedule's own time: 0 s + 1 s + … (7 s for its 8 attempts).
    expect(took).toBeLessThanOrEqual(7_000);
    expect(Math.max(...statuses(t, events).map((e) => e.attempts))).toBe(2);
  });

  it("a receiver that fails half of all requests at random: every webhook arrives within the schedule, none fails", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: `0s${",1s".repeat(15)}` });
    const random = seeded(21);
    const flaky = await receiver((_req, res) => {
      res.statusCode = random() < 0.5 ? 500 : 200;
      res.end();
    });
    const c = t.client("flaky");
    const events = await succeededTasks(t, c.apiKey, flaky.url(), 40);

    const took = await runFakeTime(t, 100, 60_000, () =>
      statuses(t, events).every((e) => e.deliveryStatus !== "pending"),
    );
    console.info(`receiver failing half at random: settled after ${took} ms of fake time`);
    expect(statuses(t, events).map((e) => e.deliveryStatus)).toEqual(Array(40).fill("succeeded"));
    expect(took).toBeLessThanOrEqual(15_000);
    // Bounded in fake time above; in real time each step waits out its records' commit, and which
    // webhook meets a 500 depends on arrival order: 3–18 s at load 8–11 on 2 shared cores.
  }, 60_000);

  it("a host that refuses connections is paused, and its events wait without using up their retries", async () => {
    // Failed trials spend no retry while an event has waited less than its whole schedule (here an hour).
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1s,30m,30m" });
    const gone = await startReceiver(ok);
    const url = gone.url();
    await gone.close(); // nothing listens there any more: every connection is refused
    const c = t.client("down");
    const events = await succeededTasks(t, c.apiKey, url, 10);
    const key = `${c.id}|${destinationHost(url)}`;

    await runFakeTime(t, 1_000, 10 * 60_000, () => false);
    const rows = statuses(t, events);
    // Ten minutes of a dead host: paused, trials now and then, but no event spent its schedule.
    expect(t.relay.dispatcher.breakers.state(key)).not.toBe("closed");
    expect(rows.map((e) => e.deliveryStatus)).toEqual(Array(10).fill("pending"));
    expect(Math.max(...rows.map((e) => e.roundAttempts))).toBeLessThan(4);
    const trials = rows.reduce((n, e) => n + e.attempts, 0) - rows.reduce((n, e) => n + e.roundAttempts, 0);
    expect(trials).toBeGreaterThanOrEqual(5);
  });
});

describe("paused hosts cost nothing while they have nothing to send, and recover from errors", () => {
  it("a paused host whose events all ended is forgotten at its trial time: no trial query every tick", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s" });
    const dead = await receiver(status(500));
    const c = t.client("gone-for-good");
    const events = await succeededTasks(t, c.apiKey, dead.url(), 6);
    const key = `${c.id}|${destinationHost(dead.url())}`;
    while ((await t.relay.dispatcher.runOnce()) > 0);
    expect(statuses(t, events).map((e) => e.deliveryStatus)).toEqual(Array(6).fill("failed"));
    expect(t.relay.dispatcher.breakers.state(key)).toBe("open");
    const trials = vi.spyOn(t.store.events, "claimTrial");
    t.clock.advance(60_000);
    const tick = await t.relay.dispatcher.tick();
    expect(trials).toHaveBeenCalledTimes(1);
    expect(t.relay.dispatcher.breakers.state(key)).toBe("closed");
    // Nothing due anywhere: the loop sleeps instead of spinning on the paused host.
    expect(tick.nextDueAt).toBeNull();
    await t.relay.dispatcher.tick();
    expect(trials).toHaveBeenCalledTimes(1);
  });

  it("a trial whose claim fails (database busy) hands its permit back: the next tick sends the trial", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: ONE_SECOND_SCHEDULE });
    const dead = await receiver(status(503));
    const c = t.client("busy-db");
    const events = await succeededTasks(t, c.apiKey, dead.url(), 8);
    const key = `${c.id}|${destinationHost(dead.url())}`;
    await runFakeTime(t, 200, 1_400, () => t.relay.dispatcher.breakers.state(key) === "open");
    expect(t.relay.dispatcher.breakers.state(key)).toBe("open");
    dead.setAnswer(ok);
    const trials = vi
      .spyOn(t.store.events, "claimTrial")
      .mockRejectedValueOnce(new Error("SQLITE_BUSY: database is locked"));
    t.clock.advance(t.relay.dispatcher.breakers.nextTrialAt()! - t.clock.now());
    // The failed claim hands the permit back, so the trial still goes (in this claim or the next).
    await t.relay.dispatcher.runOnce();
    await t.relay.dispatcher.runOnce();
    expect(trials).toHaveBeenCalled();
    expect(t.relay.dispatcher.breakers.state(key)).toBe("closed");
    await runFakeTime(t, 200, 5_000, () => statuses(t, events).every((e) => e.deliveryStatus === "succeeded"));
    expect(statuses(t, events).map((e) => e.deliveryStatus)).toEqual(Array(8).fill("succeeded"));
  });
});

describe("fair share of the pool", () => {
  it("one claim never gives the reserve away: two clients with backlogs and nothing in flight share the pool less an eighth; a third still gets a slot", async () => {
    const { t } = suite.setup({ WEBHOOK_TIMEOUT_MS: "2000" });
    const hanging = await Promise.all(Array.from({ length: 10 }, () => receiver(hang)));
    const fast = await receiver(ok);
    const a = t.client("backlog-a");
    const b = t.client("backlog-b");
    const victim = t.client("victim");
    for (const r of hanging.slice(0, 5)) await succeededTasks(t, a.apiKey, r.url(), 8);
    for (const r of hanging.slice(5)) await succeededTasks(t, b.apiKey, r.url(), 8);
    await t.relay.dispatcher.tick();
    const d = t.relay.dispatcher;
    expect(d.inFlightOf(a.id) + d.inFlightOf(b.id)).toBeLessThanOrEqual(56);
    expect(Math.abs(d.inFlightOf(a.id) - d.inFlightOf(b.id))).toBeLessThanOrEqual(1);
    const [event] = await succeededTasks(t, victim.apiKey, fast.url(), 1);
    await t.relay.dispatcher.tick();
    expect(d.inFlightOf(victim.id)).toBe(1);
    await waitFor("the victim's webhook", () => fast.arrivals.has(event!.id));
    await d.drain();
  });

  it("a client whose receivers answer 2xx slowly on 10 host:ports holds at most its share; another client's webhook goes out at once", async () => {
    const { t } = suite.setup(
      { WEBHOOK_TIMEOUT_MS: "5000", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const slowAnswer: Answer = (_req, res) => {
      setTimeout(() => res.end("ok"), 2_500);
    };
    const slow = await Promise.all(Array.from({ length: 10 }, () => receiver(slowAnswer)));
    const fast = await receiver(ok);
    const a = t.client("slow-receivers");
    const b = t.client("victim");
    for (const r of slow) await succeededTasks(t, a.apiKey, r.url(), 12);
    const bTask = await createTask(t, b.apiKey, { callback_url: fast.url() });
    startDispatcherLoop(t);

    const aOpen = () => slow.reduce((n, r) => n + r.open(), 0);
    await waitFor("A's slow attempts to fill its share", () => aOpen() >= 56, 2_000);
    const event = succeed(t, bTask);
    await waitFor("B's webhook", () => fast.arrivals.has(event.id), 2_000);
    const latency = fast.arrivals.get(event.id)! - event.createdAt;
    console.info(
      `fair share: victim's completion→webhook ${latency} ms while A holds ${aOpen()} slow attempts (pool 64, per host 8)`,
    );
    // Before #21: A held all 64 slots and B's webhook waited for A's backlog (10 s with 120 slow tasks).
    expect(latency).toBeLessThan(1_000);
    expect(Math.max(...slow.map((r) => r.maxOpen()))).toBeLessThanOrEqual(8);
    expect(t.relay.dispatcher.inFlightOf(a.id)).toBeLessThanOrEqual(56);
    await t.relay.loops.find((l) => l.name === "dispatcher")!.stop();
    await t.relay.dispatcher.drain();
  });
});

describe("a settled attempt refills its own key (#24: no scan of every due event per webhook)", () => {
  it("60 webhooks to one receiver at its per-host cap go out through per-key claims; the loop's claim of the whole due index runs a few times, not once per webhook", async () => {
    const { t } = suite.setup(
      { WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "2", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const r = await receiver((_req, res) => {
      setTimeout(() => res.end("ok"), 5);
    });
    const c = t.client("steady");
    const events = await succeededTasks(t, c.apiKey, r.url(), 60);
    const claimDue = vi.spyOn(t.store.events, "claimDue");
    const claimOfKeys = vi.spyOn(t.store.events, "claimOfKeys");
    startDispatcherLoop(t);
    await waitFor("every webhook", () => events.every((e) => r.arrivals.has(e.id)), 10_000);
    await t.relay.loops.find((l) => l.name === "dispatcher")!.stop();
    await t.relay.dispatcher.drain();
    // Never more than the cap at once, and each webhook once.
    expect(r.maxOpen()).toBeLessThanOrEqual(2);
    expect(r.arrivals.size).toBe(60);
    // Before: every settled attempt woke the loop, whose claim walked the due index past the key's backlog.
    // The settles of one turn refill in one claim (claimOfKeys): counted by the events they claimed.
    const refilled = (await Promise.all(claimOfKeys.mock.results.map((r) => r.value as Promise<unknown[]>))).flat();
    expect(refilled.length).toBeGreaterThanOrEqual(29);
    expect(claimDue.mock.calls.length).toBeLessThan(15);
  });

  it("a settled attempt's refill is asked as its record is queued: the refill's claim shares the record's commit (SQLite)", async () => {
    const { t } = suite.setup(
      { WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "2", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const r = await receiver((_req, res) => {
      setTimeout(() => res.end("ok"), 5);
    });
    const events = await succeededTasks(t, t.client("steady").apiKey, r.url(), 30);
    // Records queued and not yet durable, and the refill claims asked while one was.
    const queued = new Set<string>();
    let beforeCommit = 0;
    let claims = 0;
    const store = t.store.events;
    const [record, claim] = [store.recordAttempt.bind(store), store.claimOfKeys.bind(store)];
    vi.spyOn(store, "recordAttempt").mockImplementation((id, ...rest) => {
      queued.add(id);
      return record(id, ...rest).finally(() => queued.delete(id));
    });
    vi.spyOn(store, "claimOfKeys").mockImplementation((...args) => {
      claims += 1;
      if (queued.size > 0) beforeCommit += 1;
      return claim(...args);
    });
    startDispatcherLoop(t);
    await waitFor("every webhook", () => events.every((e) => r.arrivals.has(e.id)), 10_000);
    await t.relay.loops.find((l) => l.name === "dispatcher")!.stop();
    await t.relay.dispatcher.drain();
    expect(r.maxOpen()).toBeLessThanOrEqual(2);
    expect(r.arrivals.size).toBe(30);
    // Before: a slot went back only once its record was durable, so no refill was ever asked before the
    // commit. Most refill claims share a record's commit; since leases ahead of the cap (a refill
    // leases the key's next events to wait in memory) there are a few of them, not one per webhook.
    expect(beforeCommit).toBeGreaterThanOrEqual(1);
    expect(beforeCommit * 2).toBeGreaterThanOrEqual(claims);
  });

  it("a client at its fair share does not refill: the freed slot goes back to the pool, where another client's due webhook takes it", async () => {
    const { t } = suite.setup(
      { WEBHOOK_MAX_IN_FLIGHT: "8", WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "8", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const a = t.client("busy");
    const b = t.client("other");
    // A's counted slots as each of its attempts arrives (its own slot is counted by then).
    let aCountedMax = 0;
    const slowish = await receiver((_req, res) => {
      aCountedMax = Math.max(aCountedMax, t.relay.dispatcher.inFlightOf(a.id));
      setTimeout(() => res.end("ok"), 20);
    });
    const fast = await receiver(ok);
    const aEvents = await succeededTasks(t, a.apiKey, slowish.url(), 40);
    startDispatcherLoop(t);
    await waitFor(
      "A's attempts to fill the pool less its reserve",
      () => t.relay.dispatcher.inFlightOf(a.id) >= 7,
      2_000,
    );
    const bEvents = await succeededTasks(t, b.apiKey, fast.url(), 3);
    await waitFor("B's webhooks", () => bEvents.every((e) => fast.arrivals.has(e.id)), 3_000);
    await waitFor("A's webhooks", () => aEvents.every((e) => slowish.arrivals.has(e.id)), 10_000);
    await t.relay.loops.find((l) => l.name === "dispatcher")!.stop();
    await t.relay.dispatcher.drain();
    // A's share of a pool of 8 (less the reserve of 1) never grew past 7 through its refills. What
    // the receiver holds open may pass 7 for a moment: when B finds the pool full it takes a slot
    // back from A, whose attempt runs on uncounted (core/fair-pool.ts, "Taken back"), and A, alone
    // again once B is done, fills its share beside it. So the bound is on A's counted slots.
    expect(aCountedMax).toBe(7);
  });
});

/** A receiver for notices; its requests are verified with the standardwebhooks package. */
async function noticeReceiver() {
  const r = await startReceiver(ok);
  suite.cleanup(() => r.close());
  return r;
}

function verified(
  secret: string,
  req: Received,
  nowMs: number,
): { id: string; type: string; data: Record<string, unknown> } {
  vi.useFakeTimers({ toFake: ["Date"], now: nowMs });
  try {
    return new Webhook(secret).verify(req.body, req.headers) as {
      id: string;
      type: string;
      data: Record<string, unknown>;
    };
  } finally {
    vi.useRealTimers();
  }
}

describe("failure notices and retry now", () => {
  it("endpoint.failing after WEBHOOK_FAILING_NOTICE_AFTER without a 2xx, signed; retry now sends the paused events; endpoint.recovered at the first 2xx", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s,5s,1m,1h,1h", WEBHOOK_FAILING_NOTICE_AFTER: "10m" });
    const dead = await receiver(status(500));
    const ops = await noticeReceiver();
    const c = t.client("ops");
    await t.store.clients.update(c.id, { notificationUrl: ops.url("/notices") });
    const events = await succeededTasks(t, c.apiKey, dead.url("/hook"), 3);
    const host = destinationHost(dead.url());
    const startedAt = t.clock.now();

    await runFakeTime(t, 5_000, 9 * 60_000, () => false);
    expect(await t.relay.notifier.runOnce()).toBe(0);
    expect(ops.requests).toHaveLength(0);
    // Listed for the client (the API; the dashboard shows the same as a banner).
    const hosts = await t.request(c.apiKey, "/openapi/v1/webhooks/hosts");
    expect(((await hosts.json()) as { data: unknown[] }).data).toEqual([
      {
        host,
        failing_since: new Date(startedAt).toISOString(),
        attempts: expect.any(Number),
        pending_events: 3,
        last_error: "HTTP 500",
      },
    ]);

    t.clock.set(startedAt + 10 * 60_000);
    expect(await t.relay.notifier.runOnce()).toBe(1);
    expect(await t.relay.notifier.runOnce()).toBe(0); // once per failing run
    const failing = verified(c.secret, ops.requests[0]!, t.clock.now());
    expect(failing).toMatchObject({
      type: "endpoint.failing",
      data: { host, failing_since: new Date(startedAt).toISOString(), pending_events: 3, last_error: "HTTP 500" },
    });
    expect(failing.id).toBe(ops.requests[0]!.headers["webhook-id"]);
    expect(failing.data.attempts).toBeGreaterThanOrEqual(5);

    // The receiver is back; the client asks to retry now instead of waiting for the next trial.
    dead.setAnswer(ok);
    const retry = await t.request(c.apiKey, `/openapi/v1/webhooks/hosts/${encodeURIComponent(host)}/retry`, {
      method: "POST",
    });
    expect(retry.status).toBe(202);
    expect(((await retry.json()) as { data: { requeued: number } }).data).toEqual({ host, requeued: 3 });
    for (let i = 0; i < 3; i++) await t.relay.dispatcher.runOnce();
    expect(statuses(t, events).map((e) => e.deliveryStatus)).toEqual(["succeeded", "succeeded", "succeeded"]);
    expect(await t.relay.notifier.runOnce()).toBe(1);
    const recovered = verified(c.secret, ops.requests[1]!, t.clock.now());
    expect(recovered).toMatchObject({
      type: "endpoint.recovered",
      data: {
        host,
        failing_since: new Date(startedAt).toISOString(),
        recovered_at: new Date(t.clock.now()).toISOString(),
      },
    });
    const after = await t.request(c.apiKey, "/openapi/v1/webhooks/hosts");
    expect(((await after.json()) as { data: unknown[] }).data).toEqual([]);
  });

  it("delivery.exhausted when an event's last scheduled attempt fails", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1s" });
    // Fails every first attempt of a webhook and its retry, but answers others (so the host is not paused).
    const picky = await receiver((req, res) => {
      res.statusCode = req.url.startsWith("/bad") ? 500 : 200;
      res.end();
    });
    const ops = await noticeReceiver();
    const c = t.client("exhaust");
    await t.store.clients.update(c.id, { notificationUrl: ops.url("/notices") });
    const [bad] = await succeededTasks(t, c.apiKey, picky.url("/bad"), 1);
    await runFakeTime(t, 500, 5_000, () => findEvent(t.database.db, bad!.id)!.deliveryStatus === "failed");
    await t.relay.notifier.runOnce();
    expect(ops.requests).toHaveLength(1);
    expect(verified(c.secret, ops.requests[0]!, t.clock.now())).toMatchObject({
      type: "delivery.exhausted",
      data: {
        event_id: bad!.id,
        task_id: bad!.taskId,
        type: "task.succeeded",
        host: destinationHost(picky.url()),
        attempts: 2,
        last_error: "HTTP 500",
      },
    });
  });

  it("a notice is never sent to the failing host itself", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1s", WEBHOOK_FAILING_NOTICE_AFTER: "1m" });
    const warn = vi.spyOn(silentLogger, "warn");
    const dead = await receiver(status(500));
    const c = t.client("same-host");
    await t.store.clients.update(c.id, { notificationUrl: dead.url("/notices") });
    await succeededTasks(t, c.apiKey, dead.url("/hook"), 1);
    await runFakeTime(t, 1_000, 3_000, () => false);
    t.clock.advance(60_000);
    await t.relay.notifier.runOnce();
    expect(dead.requests.every((r) => r.url === "/hook")).toBe(true);
    expect(
      warn.mock.calls.some((call) => call[1] === "notice not sent: notification_url is on the host it is about"),
    ).toBe(true);
  });

  it("redeliver and retry now are rate-limited per client like test pings (429 rate_limit)", async () => {
    const { t } = suite.setup();
    const r = await receiver(ok);
    const c = t.client("hammer");
    const other = t.client("calm");
    const [e] = await succeededTasks(t, c.apiKey, r.url(), 1);
    await t.relay.dispatcher.runOnce();
    const redeliver = (key: string) => t.request(key, `/openapi/v1/tasks/${e!.taskId}/redeliver`, { method: "POST" });
    const codes: number[] = [];
    for (let i = 0; i < 11; i++) codes.push((await redeliver(c.apiKey)).status);
    expect(codes.slice(0, 10)).toEqual(Array(10).fill(202));
    const limited = await redeliver(c.apiKey);
    expect(limited.status).toBe(429);
    expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(((await limited.json()) as { error: { code: string } }).error.code).toBe("rate_limit");

    const host = encodeURIComponent(destinationHost(r.url()));
    const retries: number[] = [];
    for (let i = 0; i < 11; i++)
      retries.push((await t.request(c.apiKey, `/openapi/v1/webhooks/hosts/${host}/retry`, { method: "POST" })).status);
    expect(retries).toEqual([...Array(10).fill(202), 429]);
    // Per client: another client is not limited by the first one's calls.
    expect((await t.request(other.apiKey, `/openapi/v1/webhooks/hosts/${host}/retry`, { method: "POST" })).status).toBe(
      202,
    );
    // A malformed host is a 400, not a 500.
    const bad = await t.request(
      other.apiKey,
      `/openapi/v1/webhooks/hosts/${encodeURIComponent("no port here")}/retry`,
      { method: "POST" },
    );
    expect(bad.status).toBe(400);
    // After a minute the window has moved on.
    t.clock.advance(60_001);
    expect((await redeliver(c.apiKey)).status).toBe(202);
  });
});

/** Answers after `ms` (with `answer`, 200 by default): attempts that take a little real time. */
const delayed =
  (ms: number, answer: Answer = ok): Answer =>
  (req, res) => {
    setTimeout(() => answer(req, res), ms);
  };

/** A relay at a per-key cap of 2, and `count` events of one client due to a receiver answering `answer`. */
async function capOfTwoBacklog(name: string, answer: Answer, count: number) {
  const { t } = suite.setup(
    { WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "2", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
    { clock: new SystemClock() },
  );
  const r = await receiver(answer);
  const events = await succeededTasks(t, t.client(name).apiKey, r.url(), count);
  return { t, r, events };
}

/** Some requests arrived, and every one verifies with `secret` (it may carry other signatures beside). */
function expectSignedWith(secret: string, requests: Received[]): void {
  const verifies = (req: Received) => {
    try {
      new Webhook(secret).verify(req.body, req.headers);
      return true;
    } catch {
      return false;
    }
  };
  expect(requests.length).toBeGreaterThan(0);
  expect(requests.filter((req) => !verifies(req))).toHaveLength(0);
}

const stopLoop = (t: TestRelay) => t.relay.loops.find((l) => l.name === "dispatcher")!.stop();

/**
 * Leases ahead of the per-key cap (core/delivery-plan.ts, leaseRoom; workers/delivery/ahead.ts): a
 * key's refill leases its next events to wait in memory and start as its slots free, with no claim
 * in between, and never more than the cap in flight; they go back when the key's circuit opens and
 * on shutdown.
 */
/** Runs the loop until every event arrived, then stops and drains it: never more than 2 open, each once. */
async function deliverAllOnceAtCapOfTwo(t: TestRelay, r: CountingReceiver, events: EventRow[]): Promise<void> {
  startDispatcherLoop(t);
  await waitFor("every webhook", () => events.every((e) => r.arrivals.has(e.id)), 10_000);
  await stopLoop(t);
  await t.relay.dispatcher.drain();
  expect(r.maxOpen()).toBeLessThanOrEqual(2);
  expect(r.arrivals.size).toBe(events.length);
  expect(statuses(t, events).every((e) => e.deliveryStatus === "succeeded" && e.attempts === 1)).toBe(true);
}

describe("leases ahead of the per-key cap", () => {
  it("60 webhooks to one receiver at a cap of 2: a few claims of the key, not one per webhook; never more than 2 open; each arrives once", async () => {
    const { t, r, events } = await capOfTwoBacklog("steady", delayed(2), 60);
    const claimOfKeys = vi.spyOn(t.store.events, "claimOfKeys");
    await deliverAllOnceAtCapOfTwo(t, r, events);
    // Before: every settled attempt's refill claimed the key's next event (about 58 claims). Now 3 on
    // a quiet machine; with two CPU hogs beside, up to 13 were seen: a key's lease-ahead limit shrinks
    // as its attempts slow (leaseAheadLimit: cap × 4 s of lease ÷ twice the attempt time) and its
    // refill is asked at half of it, so a busy machine makes smaller, more frequent refills. Within
    // the 10 s this test allows, attempts average under 333 ms: the limit stays at 12 or more and a
    // refill leases 6 or more, about 10 refills plus the few that find nothing left. A third of one
    // claim a webhook is the bound.
    expect(claimOfKeys.mock.calls.length).toBeLessThanOrEqual(20);
  });

  it("a refill while the key's leased-ahead events still wait lingers with the records' commit; every webhook arrives once (SQLite)", async () => {
    // More than a refill leases ahead (LEASE_AHEAD_MAX): a later refill is asked while the key's events still wait.
    const { t, r, events } = await capOfTwoBacklog("lingering", delayed(1), 140);
    const joins: boolean[] = [];
    const window = t.store.attemptCommits;
    const beforeCommit = window.beforeCommit.bind(window);
    vi.spyOn(window, "beforeCommit").mockImplementation((join, options) => {
      joins.push(options?.linger === true);
      return beforeCommit(join, options);
    });
    await deliverAllOnceAtCapOfTwo(t, r, events);
    // Before: every refill ended the records' linger as it joined (a commit of a few records each time).
    expect(joins.filter(Boolean).length).toBeGreaterThanOrEqual(1);
  });

  it("draining (SIGTERM) gives the events leased ahead back: none stays leased, and the next run sends them", async () => {
    const { t, r, events } = await capOfTwoBacklog("drained", delayed(10), 60);
    startDispatcherLoop(t);
    await waitFor("a few webhooks", () => r.arrivals.size >= 8, 10_000);
    await stopLoop(t);
    await t.relay.dispatcher.drain();
    const left = statuses(t, events).filter((e) => e.deliveryStatus === "pending");
    expect(left.length).toBeGreaterThan(0);
    expect(left.filter((e) => e.claimToken !== null || e.claimedUntil !== null)).toEqual([]);
    expect(r.open()).toBe(0);
    // Given back untouched: the next claims send them, each once.
    while ((await t.relay.dispatcher.runOnce()) > 0);
    expect(r.arrivals.size).toBe(60);
    expect(statuses(t, events).every((e) => e.deliveryStatus === "succeeded" && e.attempts === 1)).toBe(true);
  });

  it("an endpoint removed while its events wait leased ahead: none of them is sent after the removal", async () => {
    const { t } = suite.setup(
      { WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "2", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const hooks = await receiver(delayed(10));
    const callbacks = await receiver(delayed(10));
    const c = t.client("removing");
    const created = await t.request(c.apiKey, "/openapi/v1/webhooks/endpoints", {
      method: "POST",
      json: { url: hooks.url() },
    });
    expect(created.status).toBe(201);
    const endpoint = ((await created.json()) as { data: { id: string } }).data.id;
    await succeededTasks(t, c.apiKey, callbacks.url(), 60);
    startDispatcherLoop(t);
    await waitFor("a few webhooks to the endpoint", () => hooks.arrivals.size >= 6, 10_000);
    const removed = await t.request(c.apiKey, `/openapi/v1/webhooks/endpoints/${endpoint}`, { method: "DELETE" });
    expect(removed.status).toBe(204);
    const atRemoval = hooks.arrivals.size;
    // The client's callbacks go on (their leased-ahead events given back are claimed anew), each once.
    await waitFor("every callback", () => callbacks.arrivals.size === 60, 10_000);
    await stopLoop(t);
    await t.relay.dispatcher.drain();
    // At most the cap's attempts were on their way when it was removed; nothing leased ahead followed.
    expect(hooks.arrivals.size).toBeLessThanOrEqual(atRemoval + 2);
    expect(hooks.arrivals.size).toBeLessThan(60);
  });

  it("a secret rotated while events wait leased ahead: every later attempt signs with the new secret", async () => {
    const { t } = suite.setup(
      { WEBHOOK_MAX_IN_FLIGHT_PER_HOST: "2", WEBHOOK_RETRY_SCHEDULE: "0s,1h" },
      { clock: new SystemClock() },
    );
    const r = await receiver(delayed(10));
    const c = t.client("rotating");
    await succeededTasks(t, c.apiKey, r.url(), 60);
    startDispatcherLoop(t);
    await waitFor("a few webhooks", () => r.arrivals.size >= 6, 10_000);
    const res = await t.request(c.apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    expect(res.status).toBe(200);
    const atRotation = r.requests.length;
    const fresh = ((await res.json()) as { data: { webhook_secret: string } }).data.webhook_secret;
    await waitFor("every webhook", () => r.arrivals.size === 60, 10_000);
    await stopLoop(t);
    await t.relay.dispatcher.drain();
    // At most the cap's attempts were on their way at the rotation; every one started after it was
    // signed with the row read after it (both secrets: the new one verifies), none with the old row.
    expectSignedWith(fresh, r.requests.slice(atRotation + 2));
  });

  it("another process rotates the secret while events wait leased ahead (the CLI beside the server): later attempts sign with it; its other commits give nothing back", async () => {
    const { t, r } = await capOfTwoBacklog("rotated-elsewhere", delayed(10), 60);
    const c = (await t.store.clients.list()).find((x) => x.name === "rotated-elsewhere");
    // Another connection to the same file, as the CLI opens: its commits reach the server only
    // through PRAGMA data_version (ClientStore.pollChanges).
    const other = sqliteStore(openDatabase(t.config.databasePath, { migrate: false }));
    suite.cleanup(async () => other.close());
    let seenElsewhere = 0;
    t.store.clients.watch((id) => {
      if (id === null) seenElsewhere += 1;
    });
    // What the dispatcher gives back is handed to its lifecycle's release (workers/delivery/ahead.ts).
    const ahead = (t.relay.dispatcher as unknown as { ahead: { deps: { lifecycle: { release: () => unknown } } } })
      .ahead;
    const released = vi.spyOn(ahead.deps.lifecycle, "release");
    startDispatcherLoop(t);
    await waitFor("a few webhooks", () => r.arrivals.size >= 6, 10_000);
    // A commit of the other process that changes none of what an attempt reads (a running counter):
    // seen (PRAGMA data_version), the rows read again, nothing waiting handed back.
    await other.clients.update(c!.id, { pointsCharged: c!.pointsCharged + 1 });
    const seen = r.arrivals.size;
    await waitFor("more webhooks", () => r.arrivals.size >= seen + 6, 10_000);
    expect(seenElsewhere).toBeGreaterThan(0);
    expect(released).not.toHaveBeenCalled();
    const rotated = (await rotateSecret({ store: other, clock: t.clock }, c!.id, t.config.encryptionKey))!;
    const atRotation = r.requests.length;
    await waitFor("every webhook", () => r.arrivals.size === 60, 10_000);
    await stopLoop(t);
    await t.relay.dispatcher.drain();
    expectSignedWith(rotated.secret, r.requests.slice(atRotation + 2));
  });

  it("a key whose circuit opens gives its leased-ahead events back, due at the trial: none stays leased", async () => {
    // The host fails (5xx): after a few attempts its circuit opens.
    const { t, events } = await capOfTwoBacklog("breaking", delayed(5, status(500)), 80);
    startDispatcherLoop(t);
    const host = statuses(t, events)[0]!.destinationHost!;
    const key = `${events[0]!.clientId}|${host}`;
    await waitFor("the circuit to open", () => t.relay.dispatcher.breakers.state(key) === "open", 10_000);
    await waitFor("the attempts in flight to settle", () => t.relay.dispatcher.inFlightTo(key) === 0, 5_000);
    const pending = statuses(t, events).filter((e) => e.deliveryStatus === "pending");
    expect(pending.filter((e) => e.claimToken !== null)).toEqual([]);
    // Every unsent event waits for the circuit's trial (or its retry, an hour on), none due before.
    const now = Date.now();
    expect(pending.filter((e) => e.attempts === 0 && e.nextAttemptAt! <= now)).toEqual([]);
    await stopLoop(t);
    await t.relay.dispatcher.drain();
  });
});

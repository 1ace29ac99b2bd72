import { afterEach, describe, expect, it } from "vitest";
import { DeliveryLifecycle, recoverFailed, redeliverLast } from "../../src/core/delivery.js";
import { silentLogger } from "../../src/logger.js";
import { KeyHealth } from "../../src/core/key-health.js";
import { sendResult } from "../../src/webhooks/sender.js";
import { attemptOf, claimEvents, eventsOf, opts } from "../helpers/conformance.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { MAX_KEY_BYTES, StoreValueError } from "../../src/store/values.js";
import { contractClient, contractTask, CONTRACT_NOW as NOW, storeDialects } from "../helpers/store-dialects.js";

/**
 * The Store's delivery operations (#21) on both drivers: attempt bookkeeping that no receiver's
 * answer can fail, fair claims across clients, trials, retry-now, endpoint health and notices.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each(storeDialects((fn) => cleanups.push(fn)))("Store delivery operations on %s", (_name, make) => {
  it("hostile answer bodies (NUL, broken UTF-16, 10 MB, endless) are stored as at most 4 KiB of clean text; the batch all commits", async () => {
    const { store } = await make();
    const { events } = await eventsOf(store, 4);
    const claimed = await claimEvents(store, "d:1");
    const lifecycle = new DeliveryLifecycle({ store, clock: new FakeClock(NOW), retryScheduleMs: [0, 1000] });
    const bodies = ["ok\u0000", "bad \uD800 half", "x".repeat(10 * 1024 * 1024), "é".repeat(5000)];
    // All four settle in the same turn: one group commit on each driver.
    await Promise.all(
      claimed.map((e, i) =>
        lifecycle.recordAttempt(
          e,
          NOW,
          sendResult({
            ok: true,
            statusCode: 200,
            responseBody: bodies[i]!,
            error: i === 0 ? "NUL\u0000in error" : null,
          }),
        ),
      ),
    );
    for (const e of events) {
      expect(await store.events.find(e.id)).toMatchObject({ deliveryStatus: "succeeded", claimToken: null });
      const [attempt] = await store.events.attemptsOfTask(e.taskId);
      expect(Buffer.byteLength(attempt!.responseBody!, "utf8")).toBeLessThanOrEqual(4096);
      expect(attempt!.responseBody).not.toContain("\u0000");
      expect(attempt!.responseBody).not.toMatch(/[\uD800-\uDFFF]/);
    }
    const stored = await Promise.all(events.map(async (e) => (await store.events.attemptsOfTask(e.taskId))[0]!));
    expect(stored[0]!.responseBody).toBe("ok\uFFFD");
    expect(stored[0]!.error).toBe("NUL\uFFFDin error");
    expect(stored[3]!.responseBody).toBe("é".repeat(2048));
  });

  it("one record the database refuses never rolls back the others settling with it", async () => {
    const { store } = await make();
    await eventsOf(store, 3);
    const claimed = await claimEvents(store, "d:1");
    // Straight to the store, past the core's cleaning: PostgreSQL refuses NUL in text, SQLite takes it.
    const results = await Promise.allSettled(
      claimed.map((e, i) =>
        store.events.recordAttempt(e.id, "d:1", attemptOf(e, 200, { responseBody: i === 1 ? "bad\u0000" : "fine" }), {
          deliveryStatus: "succeeded",
          attempts: 1,
        }),
      ),
    );
    expect(results[0]!.status).toBe("fulfilled");
    expect(results[2]!.status).toBe("fulfilled");
    expect((await store.events.find(claimed[0]!.id))!.deliveryStatus).toBe("succeeded");
    expect((await store.events.find(claimed[2]!.id))!.deliveryStatus).toBe("succeeded");
  });

  it("attempts settling in one turn are written together; a record refused among them falls back to one row each", async () => {
    const { store } = await make();
    await eventsOf(store, 3);
    const claimed = await claimEvents(store, "d:1");
    // The second record reuses the first's attempt id: both databases refuse it (primary key).
    const rows = claimed.map((e) => attemptOf(e, 200, { responseBody: "fine" }));
    rows[1] = { ...rows[1]!, id: rows[0]!.id };
    const results = await Promise.allSettled(
      claimed.map((e, i) =>
        store.events.recordAttempt(e.id, "d:1", rows[i]!, {
          deliveryStatus: "succeeded",
          attempts: 1,
        }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const states = await Promise.all(claimed.map(async (e) => (await store.events.find(e.id))!));
    expect(states.map((e) => [e.deliveryStatus, e.claimToken])).toEqual([
      ["succeeded", null],
      ["pending", "d:1"],
      ["succeeded", null],
    ]);
    expect((await store.events.attemptsOfTask(claimed[1]!.taskId)).length).toBe(0);
  });

  it("claims take clients in turns, each within its room, and leave out clients at their share", async () => {
    const { store } = await make();
    const a = await eventsOf(store, 10);
    const b = await eventsOf(store, 3);
    const picked = await claimEvents(store, "d:1", { limit: 6, clientRoom: () => 100 });
    // A's ten were due first, yet B's come in turns with A's.
    expect(picked.filter((e) => e.clientId === b.clientId)).toHaveLength(3);
    const rest = await claimEvents(store, "d:2", { excludeClients: [a.clientId] });
    expect(rest).toEqual([]);
    // The room is asked before each pick, with what the claim took so far.
    const roomed = await claimEvents(store, "d:3", {
      clientRoom: (id, picked) => (id === a.clientId ? 2 - (picked.get(id) ?? 0) : 0),
    });
    expect(roomed.map((e) => e.clientId)).toEqual([a.clientId, a.clientId]);
    expect(
      await store.events.nextDueAt({ now: NOW, excludeKeys: [], excludeClients: [a.clientId, b.clientId] }),
    ).toBeNull();
  });

  it("a paused key's trial is an event already attempted; retry-now makes the key's events due; pending counts them", async () => {
    const { store } = await make();
    const { clientId, events } = await eventsOf(store, 3, "https://hooks.example:8443/in");
    const host = "hooks.example:8443";
    // The second event was attempted once; all three are postponed to a trial a minute away.
    for (const e of await claimEvents(store, "d:1")) {
      await store.events.release(
        e.id,
        "d:1",
        e.id === events[1]!.id ? { attempts: 1, roundAttempts: 1, nextAttemptAt: NOW } : {},
      );
    }
    expect(await store.events.postponeKey(clientId, host, NOW + 60_000, NOW)).toBe(3);
    expect(
      await store.events.claimTrial({ clientId, host }, { now: NOW, leaseMs: 30_000, token: "t:0" }),
    ).toBeUndefined();
    const trial = await store.events.claimTrial(
      { clientId, host },
      { now: NOW + 60_000, leaseMs: 30_000, token: "t:1" },
    );
    expect(trial?.id).toBe(events[1]!.id);
    expect(await store.events.pendingOfKey({ clientId, host })).toBe(3);
    // Retry-now: the two unleased ones are due at once (the trial's lease is left alone).
    expect(await store.events.retryKeyNow({ clientId, host }, NOW + 1)).toBe(2);
    expect((await store.events.find(events[0]!.id))!.nextAttemptAt).toBe(NOW + 1);
  });

  it("endpoint health: a failing run opens once, counts attempts, is noticed once across instances, and ends at a 2xx", async () => {
    const { store, another } = await make();
    const { clientId } = await eventsOf(store, 1);
    const key = { clientId, host: "hooks.example:443" };
    // Only clients with someone to tell are listed for a notice.
    await store.keyHealth.recordFailure(
      { clientId: (await contractClient(store)).id, host: key.host },
      NOW,
      "HTTP 500",
    );
    await store.clients.update(clientId, { notificationUrl: "https://ops.example/notices" });
    expect(await store.keyHealth.recordSuccess(key, NOW)).toBeNull();
    await store.keyHealth.recordFailure(key, NOW, "HTTP 500");
    await store.keyHealth.recordFailure(key, NOW + 1_000, "timeout after 15000 ms");
    expect(await store.keyHealth.failingOf(clientId)).toMatchObject([
      { host: key.host, failingSince: NOW, failedAttempts: 2, lastError: "timeout after 15000 ms" },
    ]);
    expect(await store.keyHealth.dueForNotice(NOW - 1, 10)).toEqual([]);
    expect(await store.keyHealth.dueForNotice(NOW, 10)).toHaveLength(1);
    const other = await another();
    const marks = await Promise.all([
      store.keyHealth.markNoticed(key, NOW, NOW + 5),
      other.keyHealth.markNoticed(key, NOW, NOW + 5),
    ]);
    expect(marks.filter(Boolean)).toHaveLength(1);
    expect(await store.keyHealth.dueForNotice(NOW, 10)).toEqual([]);
    expect(await store.keyHealth.recordSuccess(key, NOW + 9_000)).toEqual({ failingSince: NOW, noticeSentAt: NOW + 5 });
    expect(await store.keyHealth.failingOf(clientId)).toEqual([]);
    // A new run starts afresh; what the dispatcher reports is cleaned before it is stored.
    const health = new KeyHealth({ store, clock: new FakeClock(NOW + 10_000), logger: silentLogger });
    await health.observe(key, "failure", "\u0000 HTTP 502");
    expect(await store.keyHealth.failingOf(clientId)).toMatchObject([
      { failingSince: NOW + 10_000, failedAttempts: 1, noticeSentAt: null, lastError: "\uFFFD HTTP 502" },
    ]);
  });

  it("failures recorded in the turn of their attempts' records: counted once each per key, the first opening the run, the last error kept; on PostgreSQL in the records' statement", async () => {
    const { store } = await make();
    const { clientId, events } = await eventsOf(store, 3, "https://a.example/x");
    const other = await eventsOf(store, 1, "https://b.example/x", clientId);
    const claimed = await claimEvents(store, "f:1");
    expect(claimed).toHaveLength(4);
    // Every statement the PostgreSQL store sends from here on (none on SQLite, whose test is delivery-turn-commit).
    const sent: string[] = [];
    const pool = (store as unknown as { pool?: { query: (...a: unknown[]) => unknown } }).pool;
    if (pool) {
      const query = pool.query.bind(pool);
      pool.query = (...a: unknown[]) => {
        const q = a[0] as string | { text: string };
        sent.push(typeof q === "string" ? q : q.text);
        return query(...a);
      };
      cleanups.push(async () => {
        pool.query = query;
      });
    }
    const lifecycle = new DeliveryLifecycle({ store, clock: new FakeClock(NOW), retryScheduleMs: [0, 60_000] });
    // As an attempt settles (workers/delivery/attempt.ts): its record, then its key's health, in one turn.
    await Promise.all(
      claimed.flatMap((e, i) => [
        lifecycle.recordAttempt(e, NOW, sendResult({ ok: false, statusCode: 500 + i, error: `HTTP 50${i}` })),
        store.keyHealth.recordFailure({ clientId, host: e.destinationHost }, NOW + i, `HTTP 50${i}`),
      ]),
    );
    const [a, b] = [events[0]!.destinationHost, other.events[0]!.destinationHost];
    const iOf = (host: string) => claimed.map((e, i) => (e.destinationHost === host ? i : -1)).filter((i) => i >= 0);
    const failing = await store.keyHealth.failingOf(clientId);
    expect(failing.map((r) => [r.host, r.failingSince, r.failedAttempts, r.lastError]).sort()).toEqual(
      [
        [a, NOW + iOf(a)[0]!, 3, `HTTP 50${iOf(a).at(-1)}`],
        [b, NOW + iOf(b)[0]!, 1, `HTTP 50${iOf(b)[0]}`],
      ].sort(),
    );
    if (pool) {
      // One statement wrote the attempts, the events' next states and the keys' health.
      const health = sent.filter(
        (q) => q.includes("endpoint_health") && !q.startsWith("SELECT * FROM endpoint_health"),
      );
      expect(health.filter((q) => !q.includes("INSERT INTO delivery_attempts"))).toEqual([]);
      expect(health.length).toBeGreaterThanOrEqual(1);
    }
  });

  it("a failure whose values the store refuses, queued in its attempt's turn, is refused as it would be alone; the attempt lands", async () => {
    const { store } = await make();
    const { clientId } = await eventsOf(store, 1, "https://a.example/x");
    const [claimed] = await claimEvents(store, "f:2");
    const lifecycle = new DeliveryLifecycle({ store, clock: new FakeClock(NOW), retryScheduleMs: [0, 60_000] });
    const [recorded, failed] = await Promise.allSettled([
      lifecycle.recordAttempt(claimed!, NOW, sendResult({ ok: false, statusCode: 500, error: "HTTP 500" })),
      store.keyHealth.recordFailure({ clientId, host: "h".repeat(MAX_KEY_BYTES + 1) }, NOW, "HTTP 500"),
    ]);
    expect(recorded.status).toBe("fulfilled");
    expect(failed).toMatchObject({ status: "rejected", reason: expect.any(StoreValueError) });
    expect((failed as PromiseRejectedResult).reason.message).toBe(`host is longer than ${MAX_KEY_BYTES} bytes`);
    expect((await store.events.attemptsOfTask(claimed!.taskId)).length).toBe(1);
    expect(await store.keyHealth.failingOf(clientId)).toEqual([]);
  });

  it("notices: an outbox of their own, claimed by one claimer, recorded under the lease", async () => {
    const { store, another } = await make();
    const { clientId } = await eventsOf(store, 1);
    const row = (id: string, at: number) => ({
      id,
      clientId,
      type: "endpoint.failing",
      payload: "{}",
      url: "https://ops.example/n",
      deliveryStatus: "pending" as const,
      nextAttemptAt: at,
      createdAt: at,
    });
    await store.notices.insert(row("evt_n1", NOW));
    await store.notices.insert(row("evt_n2", NOW + 60_000));
    expect(await store.notices.nextDueAt(NOW)).toBe(NOW);
    const other = await another();
    const [x, y] = await Promise.all([
      store.notices.claimDue({ now: NOW, leaseMs: 10_000, token: "n:1", limit: 10 }),
      other.notices.claimDue({ now: NOW, leaseMs: 10_000, token: "n:2", limit: 10 }),
    ]);
    expect([...x!, ...y!].map((n) => n.id)).toEqual(["evt_n1"]);
    const mine = x!.length > 0 ? "n:1" : "n:2";
    await store.notices.record("evt_n1", "n:other", { deliveryStatus: "succeeded" });
    expect((await store.notices.ofClient(clientId, 10)).find((n) => n.id === "evt_n1")!.deliveryStatus).toBe("pending");
    await store.notices.record("evt_n1", mine, { deliveryStatus: "succeeded", attempts: 1, deliveredAt: NOW });
    expect((await store.notices.ofClient(clientId, 10)).map((n) => [n.id, n.deliveryStatus, n.claimToken])).toEqual([
      ["evt_n2", "pending", null],
      ["evt_n1", "succeeded", null],
    ]);
    expect(await store.notices.nextDueAt(NOW)).toBe(NOW + 60_000);
    // Retention: settled notices go, pending ones stay whatever their age.
    expect(await store.notices.prune(NOW + 1, 10)).toBe(1);
    expect((await store.notices.ofClient(clientId, 10)).map((n) => n.id)).toEqual(["evt_n2"]);
    expect(await store.notices.prune(NOW + 120_000, 10)).toBe(0);
  });
});

describe.each(storeDialects((fn) => cleanups.push(fn)))("Large outputs on %s", (_name, make) => {
  it("an output too large for a webhook is stored once, in the task: its event says so and stays small enough to send", async () => {
    const { store } = await make();
    const c = await contractClient(store);
    const big = JSON.stringify({ images: [{ url: `https://files.example/${"x".repeat(300 * 1024)}.png` }] });
    const small = JSON.stringify({ images: [{ url: "https://files.example/a.png" }] });
    const ended: Record<string, string> = {};
    for (const [key, output] of [
      ["big", big],
      ["small", small],
    ] as const) {
      const { task } = await store.tasks.create(contractTask(c.id, `out-${key}`));
      await store.tasks.transition(task, { status: "succeeded", phase: "done", outputJson: output }, opts());
      ended[key] = task.id;
    }
    const bigEvent = (await store.events.lastOfTask(ended.big!))!;
    expect(Buffer.byteLength(bigEvent.payload)).toBeLessThan(8 * 1024);
    expect(JSON.parse(bigEvent.payload).data).toMatchObject({
      status: "succeeded",
      output: null,
      output_omitted: true,
    });
    expect((await store.tasks.find(ended.big!))!.outputJson).toBe(big);
    const smallEvent = (await store.events.lastOfTask(ended.small!))!;
    expect(JSON.parse(smallEvent.payload).data.output).toEqual(JSON.parse(small));
    expect(JSON.parse(smallEvent.payload).data).not.toHaveProperty("output_omitted");
  });
});

describe.each(storeDialects((fn) => cleanups.push(fn)))("Store reads with hostile values on %s", (_name, make) => {
  const hostile = [
    "task_\u0000",
    "a\u0000b",
    "\u0000",
    "x".repeat(1024 * 1024),
    "bad \uD800 half",
    "'; DROP TABLE tasks; --",
  ];

  it("reads by an id or a search text holding NUL, broken UTF-16, SQL or 1 MiB find nothing, on both drivers alike", async () => {
    const { store } = await make();
    const { clientId, events } = await eventsOf(store, 1);
    for (const v of hostile) {
      expect(await store.tasks.find(v)).toBeUndefined();
      expect(await store.tasks.findOfClient(clientId, v)).toBeUndefined();
      expect(await store.tasks.findByAnyId(v)).toEqual([]);
      expect(await store.tasks.list({ clientId, limit: 10, search: v })).toEqual([]);
      expect(await store.tasks.list({ clientId, limit: 10, beforeId: v })).toHaveLength(v > events[0]!.taskId ? 1 : 0);
      expect(await store.events.find(v)).toBeUndefined();
      expect(await store.events.lastOfTask(v)).toBeUndefined();
      expect(await store.events.ofTask(v)).toEqual([]);
      expect(await store.events.attemptsOfTask(v)).toEqual([]);
      expect(await store.clients.find(v)).toBeUndefined();
      expect(await store.clients.findByKeyHash(v)).toBeUndefined();
      expect(await store.sessions.find(v)).toBeUndefined();
      expect(await store.keyHealth.failingOf(v)).toEqual([]);
    }
    // The real rows are still there.
    expect(await store.tasks.find(events[0]!.taskId)).toBeDefined();
  });
});

describe.each(storeDialects((fn) => cleanups.push(fn)))("Delivery re-queues on %s", (_name, make) => {
  it("redeliver and recover start a new round through the core's verbs: pending, schedule from the start, due now, lease gone", async () => {
    const { store } = await make();
    const { clientId, events } = await eventsOf(store, 3);
    for (const e of await claimEvents(store, "d:1")) {
      await store.events.release(e.id, "d:1", {
        deliveryStatus: "failed",
        failedAt: NOW,
        roundAttempts: 8,
        attempts: 8,
      });
    }
    const again = await redeliverLast(store, events[0]!.taskId, NOW + 10);
    expect(again).toMatchObject({
      id: events[0]!.id,
      deliveryStatus: "pending",
      roundAttempts: 0,
      nextAttemptAt: NOW + 10,
      failedAt: null,
      claimToken: null,
      attempts: 8,
    });
    expect(await redeliverLast(store, "task_nothing", NOW)).toBeUndefined();
    expect(await recoverFailed(store, clientId, NOW + 1, NOW + 20)).toBe(0); // created before `since`
    expect(await recoverFailed(store, clientId, NOW, NOW + 20)).toBe(2);
    expect((await store.events.find(events[2]!.id))!).toMatchObject({
      deliveryStatus: "pending",
      roundAttempts: 0,
      nextAttemptAt: NOW + 20,
    });
  });
});

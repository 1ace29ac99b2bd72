import { describe, expect, it } from "vitest";
import { endpointDeliveryId } from "../../src/store/endpoint-fanout.js";
import type { Store } from "../../src/store/store.js";
import { attemptOf, claimEvents, client, conformance, fresh, NOW, opts, task } from "../helpers/conformance.js";

/**
 * WebhookEndpointStore conformance (checklist: store-conformance.md): a client's subscribed URLs, the
 * fan-out of each event to them (one row per destination, same webhook-id and body) and the end of
 * a deleted endpoint's pending deliveries, on both drivers.
 */
const suite = conformance();

let n = 0;
function endpointRow(clientId: string, extra: { url?: string; events?: string[]; headers?: string | null } = {}) {
  const host = fresh("ep.example");
  return {
    id: `ep_${String(n++).padStart(6, "0")}${process.pid}`,
    clientId,
    url: extra.url ?? `https://${host}/hook`,
    destinationHost: `${host}:443`,
    events: JSON.stringify(extra.events ?? ["task.succeeded", "task.failed", "task.canceled"]),
    description: "a test endpoint",
    headers: extra.headers ?? null,
    createdAt: NOW + n,
  };
}

/** A task of the client (with a callback unless `callbackUrl` is null) that succeeds, and every row its event wrote. */
async function succeeded(store: Store, clientId: string, callbackUrl: string | null = "https://hooks.example/cb") {
  const req = task(clientId, fresh("t"), callbackUrl ? { callbackUrl } : {});
  if (callbackUrl === null) req.row = { ...req.row, callbackUrl: null };
  const { task: t } = await store.tasks.create(req);
  await store.tasks.transition(t, { status: "succeeded", phase: "done", completedAt: NOW }, opts());
  return { task: t, rows: await store.events.ofTask(t.id) };
}

describe.each(suite.dialects)("WebhookEndpointStore on %s", (_name, h) => {
  it("create, list (oldest first), find and remove are the client's own; another client's look unknown", async () => {
    const store = await h.shared();
    const a = await client(store);
    const b = await client(store);
    const first = (await store.webhookEndpoints.create(endpointRow(a.id), 10))!;
    const second = (await store.webhookEndpoints.create(endpointRow(a.id, { events: ["task.processing"] }), 10))!;
    expect(first).toMatchObject({ clientId: a.id, description: "a test endpoint", headers: null });
    expect((await store.webhookEndpoints.list(a.id)).map((e) => e.id)).toEqual([first.id, second.id]);
    expect(await store.webhookEndpoints.find(a.id, first.id)).toEqual(first);
    expect(await store.webhookEndpoints.list(b.id)).toEqual([]);
    expect(await store.webhookEndpoints.find(b.id, first.id)).toBeUndefined();
    expect(await store.webhookEndpoints.remove(b.id, first.id, NOW)).toBe(false);
    expect(await store.webhookEndpoints.remove(a.id, first.id, NOW)).toBe(true);
    expect(await store.webhookEndpoints.remove(a.id, first.id, NOW)).toBe(false);
    expect((await store.webhookEndpoints.list(a.id)).map((e) => e.id)).toEqual([second.id]);
  });

  it("create refuses past `max` endpoints of the client (null), counting only the client's", async () => {
    const store = await h.shared();
    const a = await client(store);
    const b = await client(store);
    expect(await store.webhookEndpoints.create(endpointRow(a.id), 2)).not.toBeNull();
    expect(await store.webhookEndpoints.create(endpointRow(b.id), 2)).not.toBeNull();
    expect(await store.webhookEndpoints.create(endpointRow(a.id), 2)).not.toBeNull();
    expect(await store.webhookEndpoints.create(endpointRow(a.id), 2)).toBeNull();
    expect(await store.webhookEndpoints.list(a.id)).toHaveLength(2);
  });

  it("an event is written once per subscribed endpoint, beside the callback's row: same webhook-id and body, its own URL, host, headers", async () => {
    const store = await h.shared();
    const a = await client(store);
    const other = await client(store);
    const one = (await store.webhookEndpoints.create(endpointRow(a.id, { headers: "sealed-headers" }), 10))!;
    const two = (await store.webhookEndpoints.create(endpointRow(a.id), 10))!;
    await store.webhookEndpoints.create(endpointRow(a.id, { events: ["task.failed"] }), 10);
    await store.webhookEndpoints.create(endpointRow(other.id), 10);
    const { rows } = await succeeded(store, a.id);
    expect(rows).toHaveLength(3);
    const own = rows.find((r) => r.endpointId === null)!;
    expect(own).toMatchObject({ webhookId: null, callbackUrl: "https://hooks.example/cb", deliveryStatus: "pending" });
    const byEndpoint = rows.filter((r) => r.endpointId !== null).sort((x, y) => x.seq - y.seq);
    expect(byEndpoint.map((r) => [r.id, r.endpointId, r.webhookId, r.callbackUrl, r.destinationHost])).toEqual([
      [endpointDeliveryId(own.id, one.id), one.id, own.id, one.url, one.destinationHost],
      [endpointDeliveryId(own.id, two.id), two.id, own.id, two.url, two.destinationHost],
    ]);
    expect(byEndpoint[0]!.callbackHeaders).toBe("sealed-headers");
    for (const r of byEndpoint) {
      expect(r.payload).toBe(own.payload);
      expect(r).toMatchObject({
        type: own.type,
        sequence: own.sequence,
        deliveryStatus: "pending",
        taskId: own.taskId,
      });
    }
    // The endpoints' rows of the task, for the feed's view of each destination.
    expect((await store.webhookEndpoints.deliveriesOfTasks([own.taskId, "task_none"])).map((r) => r.id).sort()).toEqual(
      byEndpoint.map((r) => r.id).sort(),
    );
    expect(await store.webhookEndpoints.deliveriesOfTasks([])).toEqual([]);
    // The task's delivery summary and redeliver see the callback's row; the feed lists the event once.
    expect((await store.events.lastOfTask(own.taskId))!.id).toBe(own.id);
    expect((await store.events.lastOfTasks([own.taskId])).get(own.taskId)!.id).toBe(own.id);
    const feed = await store.events.feed(a.id, 0, 100);
    expect(feed.filter((e) => e.taskId === own.taskId).map((e) => e.id)).toEqual([own.id]);
  });

  it("a task without a callback_url: its row stays `none`, the endpoints' rows are pending and due", async () => {
    const store = await h.shared();
    const a = await client(store);
    const ep = (await store.webhookEndpoints.create(endpointRow(a.id), 10))!;
    const { rows } = await succeeded(store, a.id, null);
    expect(rows.map((r) => [r.endpointId, r.deliveryStatus])).toEqual(
      expect.arrayContaining([
        [null, "none"],
        [ep.id, "pending"],
      ]),
    );
    expect(rows.find((r) => r.endpointId === ep.id)!.nextAttemptAt).toBe(NOW);
  });

  it("an endpoint gets a type the task's callback_events leave out: the event is written, the callback's row `none`", async () => {
    const store = await h.shared();
    const a = await client(store);
    const ep = (await store.webhookEndpoints.create(endpointRow(a.id, { events: ["task.processing"] }), 10))!;
    const req = task(a.id, fresh("t"), { callbackUrl: "https://hooks.example/cb" });
    req.row = { ...req.row, callbackEvents: JSON.stringify(["task.succeeded"]) };
    const { task: t } = await store.tasks.create(req);
    const running = await store.tasks.transition(t, { status: "processing", phase: "submitted" }, opts());
    const processing = await store.events.ofTask(t.id);
    expect(processing.map((r) => [r.type, r.endpointId, r.deliveryStatus])).toEqual(
      expect.arrayContaining([
        ["task.processing", null, "none"],
        ["task.processing", ep.id, "pending"],
      ]),
    );
    expect(processing).toHaveLength(2);
    // task.succeeded: the callback's, and no endpoint's (it subscribes to task.processing only).
    await store.tasks.transition(running!, { status: "succeeded", phase: "done", completedAt: NOW }, opts());
    const all = await store.events.ofTask(t.id);
    expect(all.filter((r) => r.type === "task.succeeded").map((r) => [r.endpointId, r.deliveryStatus])).toEqual([
      [null, "pending"],
    ]);
    // Without endpoints, a type the task leaves out is written for no one, as before.
    const b = await client(store);
    const reqB = task(b.id, fresh("t"), { callbackUrl: "https://hooks.example/cb" });
    reqB.row = { ...reqB.row, callbackEvents: JSON.stringify(["task.succeeded"]) };
    const { task: tb } = await store.tasks.create(reqB);
    await store.tasks.transition(tb, { status: "processing", phase: "submitted" }, opts());
    expect(await store.events.ofTask(tb.id)).toEqual([]);
  });

  it("remove ends the endpoint's pending deliveries (never claimed again), keeps its delivered ones and the others'", async () => {
    const { store } = await h.fresh();
    const a = await client(store);
    const gone = (await store.webhookEndpoints.create(endpointRow(a.id), 10))!;
    const kept = (await store.webhookEndpoints.create(endpointRow(a.id), 10))!;
    const first = await succeeded(store, a.id);
    // The first event's delivery to `gone` is delivered before the removal.
    const claimed = await claimEvents(store, "tok1");
    const delivered = claimed.find((e) => e.endpointId === gone.id)!;
    await store.events.recordAttempt(delivered.id, "tok1", attemptOf(delivered, 200), {
      deliveryStatus: "succeeded",
      deliveredAt: NOW,
    });
    for (const e of claimed.filter((x) => x.id !== delivered.id)) await store.events.release(e.id, "tok1", {});
    const second = await succeeded(store, a.id);
    // Its delivery of a third event failed for good before the removal.
    const third0 = await succeeded(store, a.id);
    const failing = (await store.events.ofTask(third0.task.id)).find((r) => r.endpointId === gone.id)!;
    const [leased] = await store.events
      .claimOfKey(
        { clientId: a.id, host: gone.destinationHost },
        { now: NOW, leaseMs: 30_000, token: "tokf", limit: 10, maxPerKey: 10 },
      )
      .then((rows) => rows.filter((r) => r.id === failing.id));
    await store.events.recordAttempt(leased!.id, "tokf", attemptOf(leased!, 500), {
      deliveryStatus: "failed",
      failedAt: NOW,
    });
    for (const r of await store.events.ofTask(second.task.id))
      if (r.claimToken) await store.events.release(r.id, r.claimToken, {});
    expect(await store.webhookEndpoints.remove(a.id, gone.id, NOW)).toBe(true);
    const status = async (taskId: string, endpointId: string | null) =>
      (await store.events.ofTask(taskId)).find((r) => r.endpointId === endpointId)!.deliveryStatus;
    expect(await status(first.task.id, gone.id)).toBe("succeeded");
    expect(await status(second.task.id, gone.id)).toBe("ended");
    expect(await status(third0.task.id, gone.id)).toBe("ended");
    expect(await status(second.task.id, kept.id)).toBe("pending");
    expect(await status(second.task.id, null)).toBe("pending");
    const again = await claimEvents(store, "tok2", { now: NOW + 60_000 });
    expect(again.some((e) => e.endpointId === gone.id)).toBe(false);
    expect(again.some((e) => e.endpointId === kept.id)).toBe(true);
    // A redeliver queues again the kept endpoint's row, never the removed one's, nor the callback's.
    const rowsOf = async (taskId: string) => await store.events.ofTask(taskId);
    const secondRows = await rowsOf(second.task.id);
    const ids = secondRows.map((r) => r.id);
    const round = { deliveryStatus: "pending" as const, roundAttempts: 0, nextAttemptAt: NOW + 5 };
    expect(await store.webhookEndpoints.requeueDeliveries(ids, round)).toBe(1);
    expect(await store.webhookEndpoints.requeueDeliveries([], round)).toBe(0);
    expect((await rowsOf(second.task.id)).find((r) => r.endpointId === kept.id)!.nextAttemptAt).toBe(NOW + 5);
    expect((await rowsOf(second.task.id)).find((r) => r.endpointId === gone.id)!.deliveryStatus).toBe("ended");
    // Nor does a recover of the client's failed deliveries send anything to it.
    expect(await store.events.requeueFailed(a.id, 0, { deliveryStatus: "pending", nextAttemptAt: NOW })).toBe(0);
    // A new event of the client no longer reaches the removed endpoint.
    const third = await succeeded(store, a.id);
    expect(third.rows.map((r) => r.endpointId).sort()).toEqual([kept.id, null].sort());
  });

  it("each destination keeps its own order: an endpoint's pending event holds back only that endpoint's next one", async () => {
    const { store } = await h.fresh();
    const a = await client(store);
    const ep = (await store.webhookEndpoints.create(endpointRow(a.id, { events: ["task.processing"] }), 10))!;
    const { task: t } = await store.tasks.create(task(a.id, fresh("t"), { callbackUrl: "https://hooks.example/cb" }));
    const running = await store.tasks.transition(t, { status: "processing", phase: "submitted" }, opts());
    // The callback's task.processing is delivered; the endpoint's stays pending (its host is down).
    const first = await claimEvents(store, "tok1");
    const own = first.find((e) => e.endpointId === null)!;
    await store.events.recordAttempt(own.id, "tok1", attemptOf(own, 200), { deliveryStatus: "succeeded" });
    const mine = first.find((e) => e.endpointId === ep.id)!;
    await store.events.release(mine.id, "tok1", { nextAttemptAt: NOW + 3_600_000 });
    await store.tasks.transition(running!, { status: "succeeded", phase: "done", completedAt: NOW }, opts());
    const next = await claimEvents(store, "tok2");
    expect(next.map((e) => [e.type, e.endpointId])).toEqual([["task.succeeded", null]]);
  });
});

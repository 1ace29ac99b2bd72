import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { pgStore } from "../../src/open-store.js";
import { redeliverLast } from "../../src/core/delivery.js";
import type { NewTaskRequest, Store } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { attemptOf } from "../helpers/conformance.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { contractClient, contractTask, CONTRACT_NOW, storeDialects } from "../helpers/store-dialects.js";

/**
 * The Store contract, run on both dialects: what the rest of the relay relies on, including under
 * concurrency (on PostgreSQL several instances race for real; on SQLite, one process, the same
 * calls must give the same answers).
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const dialects = storeDialects((fn) => cleanups.push(fn));

const NOW = CONTRACT_NOW;
const client = contractClient;
const request = (clientId: string, key: string, reserve = 0, overrides: Partial<NewTaskRequest> = {}) =>
  contractTask(clientId, key, { reserve }, overrides);

const lease = (token: string, limit = 100) => ({ now: NOW, leaseMs: 30_000, token, limit });
const opts = (token: string | null = null) => ({ now: NOW, token, firstAttemptDelayMs: 0 });

describe.each(dialects)("Store contract on %s", (_name, make) => {
  it("create: the caller's key is idempotent, also when 20 identical creations race", async () => {
    const { store } = await make();
    const c = await client(store);
    const results = await Promise.all(Array.from({ length: 20 }, () => store.tasks.create(request(c.id, "same-key"))));
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    expect(new Set(results.map((r) => r.task.id)).size).toBe(1);
    expect((await store.tasks.list({ clientId: c.id, limit: 10 })).length).toBe(1);
  });

  it("create without a cap or credit limit (group-committed on PostgreSQL): a burst of distinct and identical keys, and one row the database refuses, each answered alone", async () => {
    const { store } = await make();
    const c = await client(store);
    const plain = { needs: { waiting: false, credit: false } };
    const distinct = Array.from({ length: 40 }, (_, i) => store.tasks.create(request(c.id, `burst-${i}`, 0, plain)));
    const same = Array.from({ length: 10 }, () => store.tasks.create(request(c.id, "burst-same", 0, plain)));
    // A key no index row can hold on PostgreSQL (SQLite takes it): it may fail, but only by itself.
    const huge = store.tasks.create(request(c.id, "k".repeat(1024 * 1024), 0, plain));
    const [created, replays, outlier] = await Promise.all([
      Promise.all(distinct),
      Promise.all(same),
      huge.then(
        () => "created",
        () => "refused",
      ),
    ]);
    expect(created.every((r) => !r.replayed)).toBe(true);
    expect(replays.filter((r) => !r.replayed)).toHaveLength(1);
    expect(new Set(replays.map((r) => r.task.id)).size).toBe(1);
    const stored = await store.tasks.list({ clientId: c.id, limit: 100 });
    expect(stored.length).toBe(41 + (outlier === "created" ? 1 : 0));
    expect(stored.find((t) => t.id === created[7]!.task.id)).toEqual(created[7]!.task);
  });

  it("findByUpstreamId: the task an upstream id is bound to on its account, none on another account or for another id", async () => {
    const { store } = await make();
    const c = await client(store);
    const { task: t } = await store.tasks.create(request(c.id, "bound"));
    await store.tasks.transition(t, { upstreamTaskId: "up-1", status: "processing", phase: "submitted" }, opts());
    expect((await store.tasks.findByUpstreamId("default", "up-1"))?.id).toBe(t.id);
    expect(await store.tasks.findByUpstreamId("another-account", "up-1")).toBeUndefined();
    expect(await store.tasks.findByUpstreamId("default", "up-2")).toBeUndefined();
  });

  it("create: a refusal from admit stores nothing; a reservation reaches the client's books", async () => {
    const { store } = await make();
    const c = await client(store, { creditLimit: 100 });
    await expect(
      store.tasks.create(
        request(c.id, "refused", 0, {
          admit: () => {
            throw new Error("no room");
          },
        }),
      ),
    ).rejects.toThrow("no room");
    expect(await store.tasks.list({ clientId: c.id, limit: 10 })).toEqual([]);
    await store.tasks.create(request(c.id, "held", 30));
    expect((await store.clients.creditPosition(c.id))?.reserved).toBe(30);
  });

  it("transition: status, credits and the outbox event together; a lost lease changes nothing", async () => {
    const { store } = await make();
    const c = await client(store);
    const { task } = await store.tasks.create(request(c.id, "to-run", 10));
    const [claimed] = await store.tasks.claimDue("waiting", "default", lease("w:1"));
    expect(claimed!.id).toBe(task.id);
    expect(await store.tasks.transition(claimed!, { status: "processing" }, opts("w:other"))).toBeUndefined();
    const running = await store.tasks.transition(
      claimed!,
      { status: "processing", phase: "submitted", claimToken: null, claimedUntil: null },
      opts("w:1"),
    );
    expect(running).toMatchObject({ status: "processing", eventSequence: 1, claimToken: null });
    const done = await store.tasks.transition(
      running!,
      { status: "succeeded", phase: "done", pointsCharged: 12, pointsRefunded: 0 },
      opts(),
    );
    expect(done).toMatchObject({ status: "succeeded", pointsReserved: 0, eventSequence: 2 });
    expect(await store.clients.creditPosition(c.id)).toMatchObject({ charged: 12, refunded: 0, reserved: 0 });
    const events = await store.events.ofTask(task.id);
    expect(events.map((e) => [e.type, e.sequence, e.clientSeq, e.destinationHost])).toEqual([
      ["task.processing", 1, 0, "hooks.example:443"],
      ["task.succeeded", 2, 0, "hooks.example:443"],
    ]);
    expect(await store.clients.ledger(c.id)).toEqual([{ taskId: task.id, charged: 12, refunded: 0, at: NOW }]);
  });

  it("claims: two claimers at once never get the same task", async () => {
    const { store, another } = await make();
    const c = await client(store);
    for (let i = 0; i < 30; i++) await store.tasks.create(request(c.id, `claim-${i}`));
    const other = await another();
    const [a, b] = await Promise.all([
      store.tasks.claimDue("waiting", "default", lease("a:1", 20)),
      other.tasks.claimDue("waiting", "default", lease("b:1", 20)),
    ]);
    const ids = [...a!, ...b!].map((t) => t.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(30);
  });

  it("beginSubmission: the decision sees the task and the client's position, in the transaction that acts on it", async () => {
    const { store } = await make();
    const c = await client(store, { creditLimit: 50 });
    await store.tasks.create(request(c.id, "submit-me", 20));
    const [claimed] = await store.tasks.claimDue("waiting", "default", lease("s:1"));
    let seen: { reserved: number | undefined; attempts: number } | null = null;
    const result = await store.tasks.beginSubmission(
      claimed!.id,
      "s:1",
      (ctx) => {
        seen = { reserved: ctx.position?.reserved, attempts: ctx.task.submitAttempts };
        return {
          kind: "go" as const,
          transition: true,
          patch: { submitAttempts: ctx.task.submitAttempts + 1, pointsReserved: 40 },
        };
      },
      opts("s:1"),
    );
    expect(seen).toEqual({ reserved: 20, attempts: 0 });
    expect(result).toMatchObject({ kind: "go", task: { submitAttempts: 1, pointsReserved: 40 } });
    expect((await store.clients.creditPosition(c.id))?.reserved).toBe(40);
    expect(
      await store.tasks.beginSubmission(
        claimed!.id,
        "s:stale",
        () => ({ kind: "go" as const, transition: true, patch: {} }),
        opts("s:stale"),
      ),
    ).toBeNull();
  });

  it("events: claims respect the per-key cap across claimers; an attempt is recorded with the lease released", async () => {
    const { store, another } = await make();
    const c = await client(store);
    for (let i = 0; i < 5; i++) {
      const { task } = await store.tasks.create(request(c.id, `ev-${i}`));
      await store.tasks.transition(task, { status: "succeeded", phase: "done" }, opts());
    }
    const claim = (s: Store, token: string) =>
      s.events.claimDue({ ...lease(token, 10), excludeKeys: [], keyRoom: () => 10, maxPerKey: 2 });
    const first = await claim(store, "d:1");
    const other = await another();
    const second = await claim(other, "d:2");
    if (store === other) {
      // One process: the caller's keyRoom (its own in-flight count and breaker) is all that bounds a claim.
      expect(first).toHaveLength(5);
    } else {
      // Shared: the second instance sees the first one's leases count against the key's cap.
      expect(first).toHaveLength(2);
      expect(second).toHaveLength(0);
    }
    const e = first[0]!;
    await store.events.recordAttempt(e.id, "d:1", attemptOf(e, 200), {
      deliveryStatus: "succeeded",
      deliveredAt: NOW,
      attempts: 1,
    });
    expect(await store.events.find(e.id)).toMatchObject({
      deliveryStatus: "succeeded",
      claimToken: null,
      claimedUntil: null,
      attempts: 1,
    });
    expect((await store.events.attemptsOfTask(e.taskId)).map((a) => a.statusCode)).toEqual([200]);
  });

  it("the read budget: 30 takers at once get exactly the 10 reads the window allows", async () => {
    const { store, another } = await make();
    const others = [store, await another(), await another()];
    const taken = await Promise.all(
      Array.from({ length: 30 }, (_, i) => others[i % 3]!.accounts.takeRead("acct", NOW + i, 10, 61_000)),
    );
    expect(taken.filter(Boolean)).toHaveLength(10);
    // Which ten won depends on the race; a minute after the last of them, the window is empty again.
    expect(await store.accounts.takeRead("acct", NOW + 29 + 61_000, 10, 61_000)).toBe(true);
  });

  it("leadership: one leader per account at a time; another takes over when it is gone", async () => {
    const { store, another } = await make();
    const other = await another();
    const as = (holder: string) => ({ holder, leaseMs: 20_000 });
    const [a, b] = await Promise.all([store.ops.leads("acct", as("one")), other.ops.leads("acct", as("two"))]);
    if (store === other) {
      expect([a !== null, b !== null]).toEqual([true, true]);
      return;
    }
    expect([a, b].filter(Boolean)).toHaveLength(1);
    const [leader, follower] = a ? [store, other] : [other, store];
    const [mine, theirs] = a ? ["one", "two"] : ["two", "one"];
    expect(await leader.ops.leads("acct", as(mine))).toEqual(a ?? b);
    expect(await follower.ops.leads("acct", as(theirs))).toBeNull();
    await leader.close();
    expect(await follower.ops.leads("acct", as(theirs))).toEqual({ account: "acct", fence: (a ?? b)!.fence + 1 });
  });

  it("prune: finished tasks past retention go with their events and attempts; unsettled ones stay", async () => {
    const { store } = await make();
    const c = await client(store);
    const { task: old } = await store.tasks.create(request(c.id, "old-one"));
    await store.tasks.transition(old, { status: "failed", phase: "done", completedAt: NOW }, opts());
    const [event] = await store.events.ofTask(old.id);
    await store.events.release(event!.id, "nobody", {});
    const { task: pending } = await store.tasks.create(request(c.id, "pending-one"));
    await store.tasks.transition(pending, { status: "failed", phase: "done", completedAt: NOW }, opts());
    // The first event is settled (delivered), the second still pending.
    const [claimed] = await store.events.claimDue({
      ...lease("p:1", 1),
      excludeKeys: [],
      keyRoom: () => 1,
      maxPerKey: 8,
    });
    await store.events.release(claimed!.id, "p:1", { deliveryStatus: "succeeded" });
    expect(await store.tasks.pruneFinished(NOW + 1, 10)).toBe(1);
    expect(await store.tasks.find(claimed!.taskId)).toBeUndefined();
    expect(
      (await store.tasks.find(claimed!.taskId === old.id ? pending.id : old.id)) as TaskRow | undefined,
    ).toBeDefined();
  });

  it("dashboard reads (#21): the 'delivery failing' task filter and the count of events retrying", async () => {
    const { store } = await make();
    const c = await client(store);
    const other = await client(store);
    const ids: Record<string, string> = {};
    for (const name of ["delivered", "retrying", "exhausted", "untried", "redelivered", "theirs"]) {
      const { task } = await store.tasks.create(request(name === "theirs" ? other.id : c.id, `df-${name}`));
      await store.tasks.transition(task, { status: "succeeded", phase: "done" }, opts());
      ids[name] = task.id;
    }
    const claimed = await store.events.claimDue({
      ...lease("df:1"),
      excludeKeys: [],
      keyRoom: () => 10,
      maxPerKey: 10,
    });
    const attempt = async (name: string, statusCode: number, patch: Record<string, unknown>) => {
      const e = claimed.find((x) => x.taskId === ids[name])!;
      await store.events.recordAttempt(e.id, "df:1", attemptOf(e, statusCode), {
        attempts: 1,
        lastStatusCode: statusCode,
        lastAttemptAt: NOW,
        ...patch,
      });
    };
    await attempt("delivered", 200, { deliveryStatus: "succeeded", deliveredAt: NOW });
    await attempt("retrying", 500, { nextAttemptAt: NOW + 5_000 });
    await attempt("exhausted", 503, { deliveryStatus: "failed", failedAt: NOW });
    await attempt("redelivered", 204, { deliveryStatus: "succeeded", deliveredAt: NOW });
    await attempt("theirs", 500, { nextAttemptAt: NOW + 5_000 });
    // A redelivered event is pending again, but its last answer was a 2xx: not failing.
    await redeliverLast(store, ids.redelivered!, NOW);
    const failing = await store.tasks.list({ clientId: c.id, limit: 10, deliveryFailing: true });
    expect(failing.map((t) => t.id)).toEqual([ids.exhausted, ids.retrying]);
    expect((await store.tasks.list({ clientId: c.id, limit: 1, deliveryFailing: true })).map((t) => t.id)).toEqual([
      ids.exhausted,
    ]);
    expect(await store.tasks.list({ clientId: c.id, limit: 10, deliveryFailing: true, status: "failed" })).toEqual([]);
    expect(await store.tasks.list({ clientId: c.id, limit: 10 })).toHaveLength(5);
    expect(await store.events.retryingOfClient(c.id)).toBe(1);
    expect(await store.events.retryingOfClient(other.id)).toBe(1);
  });
});

describe("the events feed on PostgreSQL never skips a late commit", () => {
  /** A store on a database of its own (both gone after the test), a client and one task of it. */
  async function clientWithTask() {
    const db = await freshPgDatabase();
    const store = await pgStore(db.url, { migrate: false });
    cleanups.push(async () => {
      await store.close();
      await db.drop();
    });
    const c = await client(store);
    const { task } = await store.tasks.create(request(c.id, "feed-task"));
    return { db, store, c, task };
  }

  it("an event written earlier but committed later is placed after the ones a reader has passed", async () => {
    const { db, store, c, task } = await clientWithTask();
    // Two writers on their own connections, writing an event as a transition does (no feed position yet).
    const writer = async () => {
      const conn = new pg.Client({ connectionString: db.url });
      await conn.connect();
      await conn.query("BEGIN");
      return conn;
    };
    const insertEvent = (conn: pg.Client, seqNo: number) =>
      conn.query(
        `INSERT INTO events (id, client_id, client_seq, task_id, type, sequence, payload, delivery_status, created_at)
         VALUES ($1, $2, 0, $3, 'task.processing', $4, '{}', 'none', $5)`,
        [`evt_${seqNo}`, c.id, task.id, seqNo, NOW],
      );
    const slow = await writer();
    const fast = await writer();
    await insertEvent(slow, 1);
    // The later writer does not wait for the earlier one: nothing of the client is locked by either.
    await insertEvent(fast, 2);
    await fast.query("COMMIT");
    const first = await store.events.feed(c.id, 0, 10);
    expect(first.map((e) => [e.id, e.clientSeq])).toEqual([["evt_2", 1]]);
    await slow.query("COMMIT");
    // The reader goes on from its cursor (position 1) and still gets the late commit.
    expect((await store.events.feed(c.id, 1, 10)).map((e) => [e.id, e.clientSeq])).toEqual([["evt_1", 2]]);
    expect((await store.events.feed(c.id, 0, 10)).map((e) => e.id)).toEqual(["evt_2", "evt_1"]);
    await slow.end();
    await fast.end();
  });

  it("positions continue after the client's last one handed out, also once its events are pruned", async () => {
    const { store, c, task } = await clientWithTask();
    // A position handed out before (by an older relay's per-event counter, or a pruned event's).
    await store.pool.query("UPDATE clients SET event_seq = 41 WHERE id = $1", [c.id]);
    await store.tasks.transition(task, { status: "processing", phase: "submitted" }, opts());
    expect((await store.events.feed(c.id, 0, 10)).map((e) => e.clientSeq)).toEqual([42]);
    expect(
      Number((await store.pool.query("SELECT event_seq FROM clients WHERE id = $1", [c.id])).rows[0].event_seq),
    ).toBe(42);
  });
});

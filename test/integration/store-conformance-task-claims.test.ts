import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import { conformance, fixtures, type Probe } from "../helpers/conformance.js";

/**
 * TaskStore conformance, claims and scheduling (checklist: store-conformance.md): every claim, the
 * due times, the accounts' work and pruning, on both drivers, raced by processes and left by dead ones.
 */
const suite = conformance();
const { attemptOf, claimEvents, clientOn, fresh, lease, NOW, opts, task, tasksOf } = fixtures;
const ids = (rows: Array<{ id: string }>) => rows.map((r) => r.id);

/** `count` tasks of a client that are running upstream (phase submitted). */
async function running(store: Store, count: number, account: string) {
  const { clientId, tasks } = await tasksOf(store, count, account);
  for (const t of tasks)
    await store.tasks.transition(
      t,
      { status: "processing", phase: "submitted", submittedAt: NOW, upstreamTaskId: fresh("up") },
      opts(),
    );
  return { clientId, tasks: await Promise.all(tasks.map(async (t) => (await store.tasks.find(t.id))!)) };
}

describe.each(suite.dialects)("TaskStore claims and scheduling on %s", (_name, h) => {
  it("claimDue: due, unleased tasks of the phase and account, earliest first, under a lease, up to the limit", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    const { tasks } = await tasksOf(store, 4, account);
    await tasksOf(store, 2, fresh("acct"));
    await tasksOf(store, 1, account, { nextRunAt: NOW + 60_000 });
    const first = await store.tasks.claimDue("waiting", account, lease("w:1", 3, NOW + 10));
    expect(first.map((t) => [t.id, t.claimToken, t.claimedUntil])).toEqual(
      tasks.slice(0, 3).map((t) => [t.id, "w:1", NOW + 10 + 30_000]),
    );
    expect(ids(await store.tasks.claimDue("waiting", account, lease("w:2", 10, NOW + 10)))).toEqual([tasks[3]!.id]);
    expect(await store.tasks.claimDue("waiting", account, lease("w:3", 10, NOW + 10))).toEqual([]);
    expect(await store.tasks.claimDue("submitted", account, lease("w:4", 10, NOW + 10))).toEqual([]);
    expect(await store.tasks.claimDue("waiting", account, lease("w:5", 0, NOW + 60_000))).toEqual([]);
  });

  it("claimFairly: clients in turns (longest since admitted first), each at most its running room", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    const a = await tasksOf(store, 4, account);
    const b = await tasksOf(store, 2, account);
    const capped = await tasksOf(store, 3, account);
    await store.clients.update(capped.clientId, { maxRunning: 2 });
    await store.tasks.transition(capped.tasks[0]!, { status: "processing", phase: "submitted" }, opts());
    await store.clients.markAdmitted(a.clientId, NOW);
    await store.clients.markAdmitted(b.clientId, NOW - 1);
    await store.clients.markAdmitted(capped.clientId, NOW - 2);
    const picked = await store.tasks.claimFairly(account, lease("f:1", 6, NOW + 10));
    expect(ids(picked)).toEqual([
      capped.tasks[1]!.id,
      b.tasks[0]!.id,
      a.tasks[0]!.id,
      b.tasks[1]!.id,
      a.tasks[1]!.id,
      a.tasks[2]!.id,
    ]);
    expect(picked.every((t) => t.claimToken === "f:1")).toBe(true);
    // Running room counts tasks upstream, not claims: the capped client's next task is its turn again.
    expect(ids(await store.tasks.claimFairly(account, lease("f:2", 6, NOW + 10)))).toEqual([
      capped.tasks[2]!.id,
      a.tasks[3]!.id,
    ]);
    expect(await store.tasks.claimFairly(account, lease("f:3", 0, NOW + 10))).toEqual([]);
  });

  it("claimIds: the given tasks of the phase, due or not, that no one holds", async () => {
    const store = await h.shared();
    const { tasks } = await tasksOf(store, 3, fresh("acct"), { nextRunAt: NOW + 3_600_000 });
    await store.tasks.claimIds([tasks[0]!.id], "waiting", lease("c:0"));
    const claimed = await store.tasks.claimIds(
      [tasks[0]!.id, tasks[1]!.id, tasks[2]!.id, "task_nobody"],
      "waiting",
      lease("c:1"),
    );
    expect(ids(claimed).sort()).toEqual([tasks[1]!.id, tasks[2]!.id].sort());
    expect(await store.tasks.claimIds([tasks[0]!.id], "submitted", lease("c:2", 1, NOW + 60_000))).toEqual([]);
    expect(await store.tasks.claimIds([], "waiting", lease("c:3"))).toEqual([]);
  });

  it("claimExpired and nextExpiryAt: waiting tasks never offered upstream, past their expiry, due or not", async () => {
    const { store } = await h.fresh();
    expect(await store.tasks.nextExpiryAt()).toBeNull();
    const { tasks } = await tasksOf(store, 3, "default", { nextRunAt: NOW + 3_600_000 });
    const expires = [NOW + 20, NOW + 10, NOW + 30];
    for (const [i, t] of tasks.entries()) await store.tasks.transition(t, { expiresAt: expires[i]! }, opts());
    await store.tasks.transition(tasks[2]!, { submitAttempts: 1 }, opts());
    expect(await store.tasks.nextExpiryAt()).toBe(NOW + 10);
    expect(ids(await store.tasks.claimExpired(lease("x:1", 1, NOW + 20)))).toEqual([tasks[1]!.id]);
    expect(ids(await store.tasks.claimExpired(lease("x:1", 10, NOW + 20)))).toEqual([tasks[0]!.id]);
    expect(await store.tasks.claimExpired(lease("x:2", 10, NOW + 40))).toEqual([]);
  });

  it("claimAcrossClients: every client's oldest due task before any client's second, clients ranked", async () => {
    const { store } = await h.fresh();
    const a = await running(store, 3, "acct-a");
    const b = await running(store, 2, "acct-b");
    for (const t of [...a.tasks, ...b.tasks]) await store.tasks.transition(t, { nextRunAt: NOW }, opts());
    const rank = (clientId: string) => (clientId === b.clientId ? 0 : 1);
    const picked = await store.tasks.claimAcrossClients("submitted", { ...lease("p:1", 4), rank });
    expect(ids(picked)).toEqual([b.tasks[0]!.id, a.tasks[0]!.id, b.tasks[1]!.id, a.tasks[1]!.id]);
    expect(ids(await store.tasks.claimAcrossClients("submitted", { ...lease("p:2", 4), rank }))).toEqual([
      a.tasks[2]!.id,
    ]);
    expect(await store.tasks.claimAcrossClients("waiting", { ...lease("p:3", 4), rank })).toEqual([]);
  });

  it("nextDueAt: the earliest unleased task of the phase, or a lease's end (+1) when sooner; null with none", async () => {
    const { store } = await h.fresh();
    expect(await store.tasks.nextDueAt("waiting", NOW)).toBeNull();
    const { tasks } = await tasksOf(store, 2, "default", { nextRunAt: NOW + 60_000 });
    expect(await store.tasks.nextDueAt("waiting", NOW)).toBe(NOW + 60_000);
    await store.tasks.claimIds([tasks[0]!.id], "waiting", lease("n:1"));
    expect(await store.tasks.nextDueAt("waiting", NOW)).toBe(NOW + 30_001);
    expect(await store.tasks.nextDueAt("submitted", NOW)).toBeNull();
  });

  it("accountsWithDue, accountsInFlight, countRunning and listInFlight", async () => {
    const { store } = await h.fresh();
    await tasksOf(store, 1, "acct-due");
    await tasksOf(store, 1, "acct-later", { nextRunAt: NOW + 60_000 });
    const { tasks } = await running(store, 2, "acct-run");
    expect((await store.tasks.accountsWithDue("waiting", NOW)).sort()).toEqual(["acct-due"]);
    expect((await store.tasks.accountsWithDue("waiting", NOW + 60_000)).sort()).toEqual(["acct-due", "acct-later"]);
    expect(await store.tasks.accountsInFlight()).toEqual(["acct-run"]);
    expect(await store.tasks.countRunning("acct-run")).toBe(2);
    expect(await store.tasks.countRunning("acct-due")).toBe(0);
    const inFlight = await store.tasks.listInFlight("acct-run");
    expect(inFlight.sort((x, y) => (x.id < y.id ? -1 : 1))).toEqual(
      tasks.map((t) => ({
        id: t.id,
        upstreamTaskId: t.upstreamTaskId,
        status: "processing",
        submittedAt: NOW,
        type: "image",
        model: "p-image",
        // The task's trace context, passed on with every upstream read (none was given here).
        traceparent: null,
        tracestate: null,
      })),
    );
    expect(await store.tasks.listInFlight("acct-due")).toEqual([]);
  });

  it("pruneFinished: done tasks completed before `before` whose events are settled go with their events and attempts, a batch at a time", async () => {
    const { store } = await h.fresh();
    const c = await clientOn(store, "default");
    const ended = [];
    for (let i = 0; i < 3; i++) {
      const { task: t } = await store.tasks.create(task(c.id, `done-${i}`));
      ended.push((await store.tasks.transition(t, { status: "succeeded", phase: "done", completedAt: NOW }, opts()))!);
    }
    const { task: young } = await store.tasks.create(task(c.id, "young"));
    await store.tasks.transition(young, { status: "failed", phase: "done", completedAt: NOW + 10 }, opts());
    const { task: open } = await store.tasks.create(task(c.id, "open"));
    // The first two ended tasks' events are delivered (with an attempt each), the third's still pending.
    const delivered = await claimEvents(store, "d:1", { limit: 2 });
    expect(delivered.map((e) => e.taskId)).toEqual([ended[0]!.id, ended[1]!.id]);
    for (const e of delivered)
      await store.events.recordAttempt(e.id, "d:1", attemptOf(e, 200), { deliveryStatus: "succeeded" });
    expect(await store.tasks.pruneFinished(NOW + 1, 1)).toBe(1);
    expect(await store.tasks.pruneFinished(NOW + 1, 10)).toBe(1);
    expect(await store.tasks.pruneFinished(NOW + 1, 10)).toBe(0);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10 })).sort()).toEqual(
      [ended[2]!.id, young.id, open.id].sort(),
    );
    for (const e of delivered) {
      expect(await store.events.find(e.id)).toBeUndefined();
      expect(await store.events.attemptsOfTask(e.taskId)).toEqual([]);
    }
  });

  it("two claimers in two processes at once never take the same task, for every kind of claim", async () => {
    const { store, another } = await h.fresh();
    const other = await another();
    // Raced claims may leave some for later (both picked the same rows); what matters: none is taken twice.
    const race = async (claim: (s: Store, token: string) => Promise<Array<{ id: string }>>, expected: number) => {
      const [a, b] = await Promise.all([claim(store, "a:1"), claim(other, "b:1")]);
      const got = [...ids(a!), ...ids(b!)];
      for (let more = await claim(store, "c:1"); more.length > 0; more = await claim(store, "c:1"))
        got.push(...ids(more));
      expect(new Set(got).size).toBe(got.length);
      expect(got).toHaveLength(expected);
    };
    for (let i = 0; i < 4; i++) await tasksOf(store, 5, "acct-fair");
    await race((s, token) => s.tasks.claimFairly("acct-fair", lease(token, 15, NOW + 10)), 20);
    const { tasks } = await tasksOf(store, 12, "acct-ids", { nextRunAt: NOW + 3_600_000 });
    await race((s, token) => s.tasks.claimIds(ids(tasks), "waiting", lease(token)), 12);
    for (let i = 0; i < 3; i++) await running(store, 4, "acct-across");
    await race(
      (s, token) => s.tasks.claimAcrossClients("submitted", { ...lease(token, 8, NOW + 10), rank: () => 0 }),
      12,
    );
    await tasksOf(store, 10, "acct-expired", { expiresAt: NOW - 1, nextRunAt: NOW + 3_600_000 });
    await race((s, token) => s.tasks.claimExpired(lease(token, 6)), 10);
  });

  it("a claimer that dies: its tasks are claimable again once the lease ends, by every kind of claim", async () => {
    const { store } = await h.fresh();
    const { tasks } = await tasksOf(store, 4, "acct-dead");
    expect(await store.tasks.claimDue("waiting", "acct-dead", lease("dead:1", 10, NOW + 10))).toHaveLength(4);
    const after = NOW + 30_011;
    expect(await store.tasks.claimDue("waiting", "acct-dead", lease("live:0", 10, NOW + 30_010))).toEqual([]);
    expect(ids(await store.tasks.claimDue("waiting", "acct-dead", lease("live:1", 1, after)))).toEqual([tasks[0]!.id]);
    expect(ids(await store.tasks.claimFairly("acct-dead", lease("live:2", 1, after)))).toEqual([tasks[1]!.id]);
    expect(ids(await store.tasks.claimIds([tasks[2]!.id], "waiting", lease("live:3", 1, after)))).toEqual([
      tasks[2]!.id,
    ]);
    expect(
      ids(await store.tasks.claimAcrossClients("waiting", { ...lease("live:4", 1, after), rank: () => 0 })),
    ).toEqual([tasks[3]!.id]);
  });

  it("pruneFinished by two processes at once removes each task once", async () => {
    const { store, another } = await h.fresh();
    const c = await clientOn(store, "default", { name: "quiet" });
    for (let i = 0; i < 12; i++) {
      const req = task(c.id, `p-${i}`);
      req.row = { ...req.row, callbackUrl: null };
      const { task: t } = await store.tasks.create(req);
      await store.tasks.transition(t, { status: "succeeded", phase: "done", completedAt: NOW }, opts());
    }
    const other = await another();
    const removed = await Promise.all([
      store.tasks.pruneFinished(NOW + 1, 5),
      other.tasks.pruneFinished(NOW + 1, 5),
      store.tasks.pruneFinished(NOW + 1, 5),
      other.tasks.pruneFinished(NOW + 1, 5),
    ]);
    expect(removed.reduce((x, y) => x + y, 0)).toBe(12);
    expect(await store.tasks.list({ clientId: c.id, limit: 20 })).toEqual([]);
  });
});

describe("TaskStore claims and scheduling with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    { op: "claimDue(account)", run: (s, v) => s.tasks.claimDue("waiting", v, lease("w:x")) },
    { op: "claimFairly(account)", run: (s, v) => s.tasks.claimFairly(v, lease("w:x")) },
    {
      op: "claimIds([a real task, the value])",
      run: async (s, v) =>
        (await s.tasks.claimIds([(await tasksOf(s, 1, fresh("acct"))).tasks[0]!.id, v], "waiting", lease("w:x")))
          .length,
    },
    { op: "countRunning(account)", run: (s, v) => s.tasks.countRunning(v) },
    { op: "listInFlight(account)", run: (s, v) => s.tasks.listInFlight(v) },
  ];

  /** One due waiting task, then the claim or read with the value: what it found. */
  const seeded = (read: (s: Store, v: number) => Promise<unknown>) => async (s: Store, v: number) => (
    await tasksOf(s, 1, "default", { expiresAt: NOW }), read(s, v)
  );
  const count = async (rows: Promise<unknown[]>) => (await rows).length;
  const numbers: Array<Probe<number>> = [
    {
      op: "claimDue(now)",
      global: true,
      run: seeded((s, v) => count(s.tasks.claimDue("waiting", "default", lease("w:x", 10, v)))),
    },
    {
      op: "claimDue(limit)",
      global: true,
      run: seeded((s, v) => count(s.tasks.claimDue("waiting", "default", lease("w:x", v)))),
    },
    {
      op: "claimDue(leaseMs)",
      global: true,
      run: seeded(
        async (s, v) =>
          (await s.tasks.claimDue("waiting", "default", { now: NOW, leaseMs: v, token: "w:x", limit: 1 }))[0]
            ?.claimedUntil,
      ),
    },
    {
      op: "claimFairly(now)",
      global: true,
      run: seeded((s, v) => count(s.tasks.claimFairly("default", lease("w:x", 10, v)))),
    },
    { op: "claimExpired(now)", global: true, run: seeded((s, v) => count(s.tasks.claimExpired(lease("w:x", 10, v)))) },
    {
      op: "claimAcrossClients(now)",
      global: true,
      run: seeded((s, v) => count(s.tasks.claimAcrossClients("waiting", { ...lease("w:x", 10, v), rank: () => 0 }))),
    },
    { op: "nextDueAt(now)", global: true, run: seeded((s, v) => s.tasks.nextDueAt("waiting", v)) },
    { op: "accountsWithDue(now)", global: true, run: seeded((s, v) => s.tasks.accountsWithDue("waiting", v)) },
    { op: "pruneFinished(before)", global: true, run: seeded((s, v) => s.tasks.pruneFinished(v, 10)) },
    { op: "pruneFinished(batch)", global: true, run: seeded((s, v) => s.tasks.pruneFinished(NOW, v)) },
  ];
  suite.hostile(text, numbers);
});

import { describe, expect, it } from "vitest";
import { transitionRules } from "../../src/core/transition.js";
import type { IntakeContext, Store, SubmissionContext } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { client, conformance, fresh, NOW, opts, task, type Probe } from "../helpers/conformance.js";

/**
 * TaskStore conformance, intake and state changes (checklist: store-conformance.md): create,
 * transition, reschedule, beginSubmission and decideAndTransition on both drivers, raced, and
 * failing midway.
 */
const suite = conformance();

/** Everything a failed step could have half-written: the task, its events, the client's books, a learned price. */
async function footprint(store: Store, t: TaskRow) {
  return {
    // The feed first: reading it places the client's events in it (their client_seq).
    feed: await store.events.feed(t.clientId, 0, 100),
    task: await store.tasks.find(t.id),
    events: await store.events.ofTask(t.id),
    position: await store.clients.creditPosition(t.clientId),
    ledger: await store.clients.ledger(t.clientId),
  };
}

/** Claims the task under `token` (due or not). */
async function leased(store: Store, t: TaskRow, token: string, now = NOW): Promise<TaskRow> {
  const [claimed] = await store.tasks.claimIds([t.id], t.phase, { now, leaseMs: 30_000, token });
  expect(claimed?.id).toBe(t.id);
  return claimed!;
}

describe.each(suite.dialects)("TaskStore intake and state changes on %s", (_name, h) => {
  it("create stores the task with the reservation admit decided, and its client's books hold it", async () => {
    const store = await h.shared();
    const c = await client(store);
    const req = task(c.id, fresh("k"), { reserve: 25 });
    const { task: created, replayed } = await store.tasks.create(req);
    expect(replayed).toBe(false);
    expect(created).toEqual({
      ...req.row,
      callbackHeaders: null,
      conflictSince: null,
      metadataJson: null,
      upstreamTaskId: null,
      outputJson: null,
      pointsCharged: null,
      pointsRefunded: null,
      errorJson: null,
      pointsReserved: 25,
      eventSequence: 0,
      submitAttempts: 0,
      pollCount: 0,
      claimedUntil: null,
      claimToken: null,
      expiresAt: null,
      submittedAt: null,
      completedAt: null,
      filesJson: null,
      storedBytes: 0,
      traceparent: null,
      tracestate: null,
      outputRef: null,
    });
    expect(await store.tasks.find(created.id)).toEqual(created);
    expect((await store.clients.creditPosition(c.id))!.reserved).toBe(25);
  });

  it("create: the same key again gives the original, replayed, without asking admit", async () => {
    const store = await h.shared();
    const c = await client(store);
    const { task: original } = await store.tasks.create(task(c.id, "same-key", { reserve: 5 }));
    let asked = false;
    const again = await store.tasks.create(
      task(
        c.id,
        "same-key",
        {},
        {
          admit: () => {
            asked = true;
            return 99;
          },
        },
      ),
    );
    expect(again).toEqual({ task: original, replayed: true });
    expect(asked).toBe(false);
    // Keys are per client.
    expect((await store.tasks.create(task((await client(store)).id, "same-key"))).replayed).toBe(false);
  });

  it("create: admit sees the waiting count, the credit position and the learned price when asked, and nothing it did not ask for", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 500 });
    const priceKey = fresh("price");
    const firstReq = task(c.id, fresh("k"), { reserve: 30 });
    firstReq.row = { ...firstReq.row, priceKey };
    const { task: first } = await store.tasks.create(firstReq);
    await store.tasks.transition(first, { status: "succeeded", phase: "done", pointsCharged: 12 }, opts());
    await store.tasks.create(task(c.id, fresh("k"), { reserve: 8 }));
    const seen: IntakeContext[] = [];
    const ask = (needs: { waiting: boolean; credit: boolean }) => {
      const req = task(c.id, fresh("k"), {}, { needs, admit: (ctx) => (seen.push(ctx), 0) });
      req.row = { ...req.row, priceKey };
      return store.tasks.create(req);
    };
    await ask({ waiting: true, credit: true });
    await ask({ waiting: false, credit: false });
    expect(seen).toEqual([
      { waiting: 1, position: { charged: 12, refunded: 0, reserved: 8, limit: 500, revoked: false }, learnedPrice: 12 },
      { waiting: 0, position: undefined, learnedPrice: null },
    ]);
  });

  it("create: a refusal from admit stores nothing and reaches the caller", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 10 });
    const req = task(
      c.id,
      fresh("k"),
      {},
      {
        admit: () => {
          throw new Error("over the credit limit");
        },
      },
    );
    await expect(store.tasks.create(req)).rejects.toThrow("over the credit limit");
    expect(await store.tasks.find(req.row.id)).toBeUndefined();
    expect(await store.clients.creditPosition(c.id)).toMatchObject({ reserved: 0 });
    // The key stays free for the caller's next try.
    expect((await store.tasks.create(task(c.id, req.row.idempotencyKey))).replayed).toBe(false);
  });

  it("create: 20 identical creations from 3 processes at once make one original", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const others = [store, await another(), await another()];
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => others[i % 3]!.tasks.create(task(c.id, "raced", { reserve: 1 }))),
    );
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    expect(new Set(results.map((r) => r.task.id)).size).toBe(1);
    expect((await store.clients.creditPosition(c.id))!.reserved).toBe(1);
  });

  it("create: 30 creations racing for a credit limit of 100 at 10 each: 10 get in, the limit is never passed", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store, { creditLimit: 100 });
    const others = [store, await another(), await another()];
    const admit = (ctx: IntakeContext) => {
      const p = ctx.position!;
      if (p.charged - p.refunded + p.reserved + 10 > p.limit!) throw new Error("over the limit");
      return 10;
    };
    const results = await Promise.allSettled(
      Array.from({ length: 30 }, (_, i) => others[i % 3]!.tasks.create(task(c.id, `credit-${i}`, {}, { admit }))),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(10);
    expect((await store.clients.creditPosition(c.id))!.reserved).toBe(100);
    expect(await store.tasks.list({ clientId: c.id, limit: 100 })).toHaveLength(10);
  });

  it("create: 12 creations racing for a max_waiting of 5: 5 get in", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store, { maxWaiting: 5 });
    const others = [store, await another(), await another()];
    const admit = (ctx: IntakeContext) => {
      if (ctx.waiting >= 5) throw new Error("too many waiting");
      return 0;
    };
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => others[i % 3]!.tasks.create(task(c.id, `wait-${i}`, {}, { admit }))),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(5);
  });

  it("transition: the patch, the outbox event with its feed position and the books in one step; no status change writes no event", async () => {
    const store = await h.shared();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 20 }));
    const running = await store.tasks.transition(
      t,
      { status: "processing", phase: "submitted", upstreamTaskId: fresh("up") },
      opts(null, NOW + 1),
    );
    expect(running).toMatchObject({ status: "processing", eventSequence: 1, pointsReserved: 20 });
    const polled = await store.tasks.transition(running!, { pollCount: 1 }, opts(null, NOW + 2));
    expect(polled).toMatchObject({ pollCount: 1, eventSequence: 1 });
    const done = await store.tasks.transition(
      polled!,
      { status: "succeeded", phase: "done", pointsCharged: 15, completedAt: NOW + 3 },
      opts(null, NOW + 3),
    );
    expect(done).toMatchObject({ status: "succeeded", eventSequence: 2, pointsReserved: 0, pointsCharged: 15 });
    const events = await store.events.ofTask(t.id);
    expect(
      events.map((e) => [e.type, e.sequence, e.clientSeq, e.deliveryStatus, e.nextAttemptAt, e.destinationHost]),
    ).toEqual([
      ["task.processing", 1, 0, "pending", NOW + 1, "hooks.example:443"],
      ["task.succeeded", 2, 0, "pending", NOW + 3, "hooks.example:443"],
    ]);
    // Written without a feed position; reading the feed hands them out, in order.
    expect((await store.events.feed(t.clientId, 0, 10)).map((e) => [e.type, e.clientSeq])).toEqual([
      ["task.processing", 1],
      ["task.succeeded", 2],
    ]);
    expect(JSON.parse(events[1]!.payload)).toMatchObject({
      id: events[1]!.id,
      type: "task.succeeded",
      data: { id: t.id, status: "succeeded", previous_status: "processing" },
    });
    expect(await store.clients.creditPosition(c.id)).toMatchObject({ charged: 15, reserved: 0 });
    expect(await store.tasks.transition({ ...t, id: "task_nobody" }, { status: "failed" }, opts())).toBeUndefined();
  });

  it("transition: only while the caller's lease holds", async () => {
    const store = await h.shared();
    const { task: t } = await store.tasks.create(task((await client(store)).id, fresh("k")));
    const mine = await leased(store, t, "w:1");
    expect(await store.tasks.transition(mine, { status: "processing" }, opts("w:2"))).toBeUndefined();
    expect((await store.tasks.find(t.id))!.status).toBe("queued");
    expect(
      await store.tasks.transition(mine, { status: "processing", claimToken: null, claimedUntil: null }, opts("w:1")),
    ).toMatchObject({ status: "processing", claimToken: null });
  });

  it("transition: credits coming back wake the client's waiting tasks held for later", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 100 });
    const { task: a } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 60 }));
    const held = task(c.id, fresh("k"));
    held.row = { ...held.row, nextRunAt: NOW + 3_600_000 };
    const { task: b } = await store.tasks.create(held);
    await store.tasks.transition(a, { status: "canceled", phase: "done" }, opts(null, NOW + 5));
    expect((await store.tasks.find(b.id))!.nextRunAt).toBe(NOW + 5);
  });

  it("transition: a step failing midway (the outbox event) leaves nothing half-written", async () => {
    const store = await h.shared();
    const failing = await h.withRules({
      ...transitionRules,
      eventFor: () => {
        throw new Error("event failed midway");
      },
    });
    const c = await client(store, { creditLimit: 100 });
    const req = task(c.id, fresh("k"), { reserve: 30 });
    req.row = { ...req.row, priceKey: fresh("price") };
    const { task: t } = await store.tasks.create(req);
    const before = await footprint(store, t);
    await expect(
      failing.tasks.transition(t, { status: "succeeded", phase: "done", pointsCharged: 25 }, opts()),
    ).rejects.toThrow("event failed midway");
    expect(await footprint(store, t)).toEqual(before);
    // Not learned either: the next creation with the price key sees none.
    let learned: number | null | undefined;
    const probe = task(c.id, fresh("k"), {}, { admit: (ctx) => ((learned = ctx.learnedPrice), 0) });
    probe.row = { ...probe.row, priceKey: req.row.priceKey };
    await store.tasks.create(probe);
    expect(learned).toBeNull();
  });

  it("transition: 12 processes moving one task to processing at once write one event", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, "one"));
    const others = [store, await another(), await another()];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        others[i % 3]!.tasks.transition(t, { status: "processing", phase: "submitted" }, opts()),
      ),
    );
    expect((await store.events.ofTask(t.id)).map((e) => [e.type, e.clientSeq])).toEqual([["task.processing", 0]]);
    expect((await store.tasks.find(t.id))!.eventSequence).toBe(1);
  });

  it("reschedule patches a leased task only while the token holds", async () => {
    const store = await h.shared();
    const { task: t } = await store.tasks.create(task((await client(store)).id, fresh("k")));
    await leased(store, t, "w:1");
    expect(await store.tasks.reschedule(t.id, "w:2", { nextRunAt: NOW + 9 })).toBeUndefined();
    expect(
      await store.tasks.reschedule(t.id, "w:1", {
        nextRunAt: NOW + 10,
        pollCount: 3,
        claimToken: null,
        claimedUntil: null,
      }),
    ).toMatchObject({ nextRunAt: NOW + 10, pollCount: 3, claimToken: null });
    expect(await store.tasks.reschedule(t.id, "w:1", { nextRunAt: NOW + 11 })).toBeUndefined();
    expect(await store.tasks.reschedule("task_nobody", "w:1", { nextRunAt: NOW })).toBeUndefined();
  });

  it("reschedule with an empty patch returns the leased row unchanged", async () => {
    const store = await h.shared();
    const { task: t } = await store.tasks.create(task((await client(store)).id, fresh("k")));
    const mine = await leased(store, t, "w:1");
    expect(await store.tasks.reschedule(t.id, "w:1", {})).toEqual(mine);
  });

  it("reschedule with an empty patch and a lost lease gives undefined", async () => {
    const store = await h.shared();
    const { task: t } = await store.tasks.create(task((await client(store)).id, fresh("k")));
    await leased(store, t, "w:1");
    expect(await store.tasks.reschedule(t.id, "w:2", {})).toBeUndefined();
  });

  it("beginSubmission: decide sees the task, the client's position, the learned price and the reservations around it", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 1_000 });
    const { task: offered } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 30 }));
    await store.tasks.transition(offered, { status: "processing", phase: "submitted" }, opts());
    await store.tasks.create(task(c.id, fresh("k"), { reserve: 20 }));
    const { task: t } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 5 }));
    await store.tasks.create(task(c.id, fresh("k"), { reserve: 7 }));
    const mine = await leased(store, t, "s:1");
    let seen: SubmissionContext | undefined;
    const result = await store.tasks.beginSubmission(
      t.id,
      "s:1",
      (ctx) => (
        (seen = ctx),
        { kind: "wait", transition: false, patch: { nextRunAt: NOW + 60_000, claimToken: null, claimedUntil: null } }
      ),
      opts("s:1"),
    );
    expect(seen).toEqual({
      task: mine,
      position: { charged: 0, refunded: 0, reserved: 62, limit: 1_000, revoked: false },
      learnedPrice: null,
      reservations: { inFlight: 30, ahead: 20, others: 57 },
    });
    expect(result).toEqual({
      kind: "wait",
      task: { ...mine, nextRunAt: NOW + 60_000, claimToken: null, claimedUntil: null },
    });
    expect(await store.events.ofTask(t.id)).toEqual([]);
  });

  it("beginSubmission: a state change writes its event and books; a lost lease gives null without asking decide", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 1_000 });
    const { task: t } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 5 }));
    await leased(store, t, "s:1");
    const result = await store.tasks.beginSubmission(
      t.id,
      "s:1",
      () => ({
        kind: "go",
        transition: true,
        patch: { status: "processing", phase: "submitted", submitAttempts: 1, pointsReserved: 9 },
      }),
      opts("s:1"),
    );
    expect(result).toMatchObject({
      kind: "go",
      task: { status: "processing", submitAttempts: 1, pointsReserved: 9, eventSequence: 1 },
    });
    expect((await store.clients.creditPosition(c.id))!.reserved).toBe(9);
    let asked = false;
    expect(
      await store.tasks.beginSubmission(
        t.id,
        "s:stale",
        () => ((asked = true), { kind: "go", transition: false, patch: {} }),
        opts("s:stale"),
      ),
    ).toBeNull();
    expect(
      await store.tasks.beginSubmission(
        "task_nobody",
        "s:1",
        () => ((asked = true), { kind: "go", transition: false, patch: {} }),
        opts("s:1"),
      ),
    ).toBeNull();
    expect(asked).toBe(false);
  });

  it("beginSubmission: a decision that throws midway leaves nothing written", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 1_000 });
    const { task: t } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 5 }));
    await leased(store, t, "s:1");
    const before = await footprint(store, t);
    await expect(
      store.tasks.beginSubmission(
        t.id,
        "s:1",
        () => {
          throw new Error("the decision failed");
        },
        opts("s:1"),
      ),
    ).rejects.toThrow("the decision failed");
    expect(await footprint(store, t)).toEqual(before);
  });

  it("a lease that ran out: the next claimer holds the task; the old holder's submission, transition and reschedule change nothing", async () => {
    const store = await h.shared();
    const { task: t } = await store.tasks.create(task((await client(store)).id, fresh("k")));
    const old = await leased(store, t, "dead:1");
    expect(
      await store.tasks.claimIds([t.id], "waiting", { now: NOW + 30_000, leaseMs: 30_000, token: "live:1" }),
    ).toEqual([]);
    await leased(store, t, "live:1", NOW + 30_001);
    expect(
      await store.tasks.beginSubmission(
        t.id,
        "dead:1",
        () => ({ kind: "go", transition: true, patch: { status: "processing" } }),
        opts("dead:1"),
      ),
    ).toBeNull();
    expect(await store.tasks.transition(old, { status: "failed", phase: "done" }, opts("dead:1"))).toBeUndefined();
    expect(await store.tasks.reschedule(t.id, "dead:1", { nextRunAt: 0 })).toBeUndefined();
    expect(await store.tasks.find(t.id)).toMatchObject({ status: "queued", claimToken: "live:1", nextRunAt: NOW });
  });

  it("decideAndTransition: decide sees the current row; its patch is a transition; null writes nothing; another client's task or a lost lease is null", async () => {
    const store = await h.shared();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, fresh("k")));
    let seen: TaskRow | undefined;
    expect(await store.tasks.decideAndTransition(t.id, c.id, (current) => ((seen = current), null), opts())).toEqual({
      before: t,
      after: t,
    });
    expect(seen).toEqual(t);
    const out = await store.tasks.decideAndTransition(
      t.id,
      c.id,
      () => ({ status: "canceled", phase: "done" }),
      opts(),
    );
    expect(out).toMatchObject({ before: t, after: { status: "canceled", eventSequence: 1 } });
    expect((await store.events.ofTask(t.id)).map((e) => e.type)).toEqual(["task.canceled"]);
    expect(
      await store.tasks.decideAndTransition(t.id, (await client(store)).id, () => ({ status: "failed" }), opts()),
    ).toBeNull();
    expect(await store.tasks.decideAndTransition("task_nobody", null, () => ({ status: "failed" }), opts())).toBeNull();
    const { task: u } = await store.tasks.create(task(c.id, fresh("k")));
    await leased(store, u, "w:1");
    expect(
      await store.tasks.decideAndTransition(u.id, null, () => ({ status: "canceled", phase: "done" }), opts("w:2")),
    ).toBeNull();
    expect((await store.tasks.find(u.id))!.status).toBe("queued");
  });

  it("decideAndTransition: a decision that throws midway leaves nothing written", async () => {
    const store = await h.shared();
    const c = await client(store, { creditLimit: 50 });
    const { task: t } = await store.tasks.create(task(c.id, fresh("k"), { reserve: 5 }));
    const before = await footprint(store, t);
    await expect(
      store.tasks.decideAndTransition(
        t.id,
        c.id,
        () => {
          throw new Error("cancel failed");
        },
        opts(),
      ),
    ).rejects.toThrow("cancel failed");
    expect(await footprint(store, t)).toEqual(before);
  });

  it("decideAndTransition: 9 cancels from 3 processes at once: one cancels, the others see it canceled", async () => {
    const { store, another } = await h.fresh();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, "cancel-me"));
    const others = [store, await another(), await another()];
    const cancel = (current: TaskRow) =>
      current.status === "queued" ? { status: "canceled" as const, phase: "done" as const } : null;
    const results = await Promise.all(
      Array.from({ length: 9 }, (_, i) => others[i % 3]!.tasks.decideAndTransition(t.id, c.id, cancel, opts())),
    );
    expect(results.filter((r) => r!.before.status === "queued")).toHaveLength(1);
    expect(results.every((r) => r!.after.status === "canceled")).toBe(true);
    expect((await store.events.ofTask(t.id)).map((e) => e.type)).toEqual(["task.canceled"]);
  });
});

describe("TaskStore intake and state changes with hostile values: both drivers answer alike", () => {
  /** A new task of a new client whose row has `extra`, as stored. */
  const created = async (s: Store, extra: Partial<TaskRow>) => {
    const req = task((await client(s)).id, fresh("k"));
    req.row = { ...req.row, ...extra };
    return (await s.tasks.create(req)).task;
  };
  const text: Array<Probe<string>> = [
    {
      op: "create(idempotencyKey)",
      roundTrip: true,
      run: async (s, v) => (await s.tasks.find((await created(s, { idempotencyKey: v })).id))?.idempotencyKey,
    },
    {
      op: "create(metadataJson)",
      roundTrip: true,
      run: async (s, v) => (await s.tasks.find((await created(s, { metadataJson: v })).id))?.metadataJson,
    },
    {
      op: "create(requestJson)",
      roundTrip: true,
      run: async (s, v) => (await s.tasks.find((await created(s, { requestJson: v })).id))?.requestJson,
    },
    {
      op: "transition(errorJson)",
      roundTrip: true,
      run: async (s, v) => (await s.tasks.transition(await created(s, {}), { errorJson: v }, opts()))?.errorJson,
    },
    {
      op: "transition(upstreamTaskId)",
      roundTrip: true,
      run: async (s, v) =>
        (await s.tasks.transition(await created(s, {}), { upstreamTaskId: v }, opts()))?.upstreamTaskId,
    },
    {
      op: "transition(id)",
      run: async (s, v) => s.tasks.transition({ ...(await created(s, {})), id: v }, { status: "failed" }, opts()),
    },
    {
      op: "reschedule(token)",
      run: async (s, v) => s.tasks.reschedule((await created(s, {})).id, v, { pollCount: 1 }),
    },
    {
      op: "beginSubmission(id)",
      run: (s, v) =>
        s.tasks.beginSubmission(v, "s:1", () => ({ kind: "go", transition: false, patch: {} }), opts("s:1")),
    },
    {
      op: "decideAndTransition(id)",
      run: (s, v) => s.tasks.decideAndTransition(v, null, () => ({ status: "failed" }), opts()),
    },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "create(admit's reservation)",
      roundTrip: true,
      run: async (s, v) =>
        (await s.tasks.create(task((await client(s)).id, fresh("k"), { reserve: v }))).task.pointsReserved,
    },
    {
      op: "create(nextRunAt)",
      roundTrip: true,
      run: async (s, v) => (await s.tasks.find((await created(s, { nextRunAt: v })).id))?.nextRunAt,
    },
    {
      op: "transition(pointsCharged)",
      run: async (s, v) => {
        const t = await created(s, {});
        const after = await s.tasks.transition(t, { status: "succeeded", phase: "done", pointsCharged: v }, opts());
        return [after?.pointsCharged, (await s.clients.creditPosition(t.clientId))?.charged];
      },
    },
    {
      op: "transition(now)",
      run: async (s, v) => {
        const t = await created(s, {});
        await s.tasks.transition(t, { status: "processing" }, opts(null, v));
        return (await s.events.lastOfTask(t.id))?.nextAttemptAt;
      },
    },
    {
      op: "reschedule(nextRunAt)",
      roundTrip: true,
      run: async (s, v) => {
        const t = await created(s, {});
        await leased(s, t, "w:1");
        return (await s.tasks.reschedule(t.id, "w:1", { nextRunAt: v }))?.nextRunAt;
      },
    },
  ];
  suite.hostile(text, numbers);
});

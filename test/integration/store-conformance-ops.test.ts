import { describe, expect, it } from "vitest";
import { newClient } from "../../src/services/clients.js";
import type { NudgeTarget } from "../../src/store/store.js";
import { destinationHost } from "../../src/webhooks/destination.js";
import { memoryStore } from "../helpers/memory-store.js";
import { conformance, fixtures, type Probe } from "../helpers/conformance.js";

/**
 * OpsStore conformance (checklist: store-conformance.md): leadership, nudges, recovery, lease
 * release, the write probe, gauges and close. Where the contract itself tells the drivers apart
 * (one process on SQLite, several on PostgreSQL), each test says what each must do.
 */
const suite = conformance();
const { claimEvents, client, eventsOf, fresh, lease, NOW, opts, task, tasksOf } = fixtures;

describe.each(suite.dialects)("OpsStore on %s", (name, h) => {
  it("dialect names the driver", async () => {
    expect((await h.shared()).dialect).toBe(name);
  });

  it("leads: one leader per account across processes, with a fence that grows at each change (SQLite: one process, always the leader); another takes over when it is gone", async () => {
    const { another } = await h.fresh();
    const account = fresh("acct");
    const first = await another();
    const second = await another();
    const as = (holder: string) => ({ holder, leaseMs: 20_000 });
    const [a, b] = await Promise.all([first.ops.leads(account, as("first")), second.ops.leads(account, as("second"))]);
    if (name === "sqlite") {
      expect([a, b, await first.ops.leads("other", as("first"))]).toEqual([
        { account, fence: 0 },
        { account, fence: 0 },
        { account: "other", fence: 0 },
      ]);
      return;
    }
    expect([a, b].filter(Boolean)).toEqual([{ account, fence: 1 }]);
    const [leader, follower, other] = a ? [first, second, "second"] : [second, first, "first"];
    expect(await leader.ops.leads(account, as(a ? "first" : "second"))).toEqual({ account, fence: 1 });
    expect(await follower.ops.leads(account, as(other))).toBeNull();
    const elsewhere = fresh("acct");
    expect(await follower.ops.leads(elsewhere, as(other))).toEqual({ account: elsewhere, fence: 1 });
    await leader.close();
    expect(await follower.ops.leads(account, as(other))).toEqual({ account, fence: 2 });
  });

  it("leads: claims made as leader carry the fence; a stale one claims nothing on a shared store (SQLite: one process, the fence is ignored)", async () => {
    const { another } = await h.fresh();
    const store = await another();
    const account = fresh("acct");
    const { tasks } = await tasksOf(store, 2, account);
    const first = (await store.ops.leads(account, { holder: "first", leaseMs: 20_000 }))!;
    const stale = { account, fence: first.fence - 1 };
    const claimed = await store.tasks.claimDue("waiting", account, { ...lease("first:1", 1, NOW + 5), fence: stale });
    if (name === "sqlite") {
      expect(claimed.map((t) => t.id)).toEqual([tasks[0]!.id]);
      return;
    }
    expect(claimed).toEqual([]);
    expect(
      await store.tasks.claimFairly(account, {
        ...lease("first:2", 1, NOW + 5),
        fence: { account: fresh("acct"), fence: first.fence },
      }),
    ).toEqual([]);
    expect(
      (await store.tasks.claimIds([tasks[1]!.id], "waiting", { ...lease("first:3", 1, NOW + 5), fence: first })).map(
        (t) => t.id,
      ),
    ).toEqual([tasks[1]!.id]);
    // Another process that does not lead the account claims nothing with the leader's fence once it is gone.
    await store.close();
    const other = await another();
    expect(await other.ops.leads(account, { holder: "second", leaseMs: 20_000 })).toEqual({
      account,
      fence: first.fence + 1,
    });
    expect(await other.tasks.claimDue("waiting", account, { ...lease("first:4", 5, NOW + 5), fence: first })).toEqual(
      [],
    );
  });

  it("listen: another process's writes wake this one's loops by name (SQLite: one process, nothing to hear)", async () => {
    const { store, another } = await h.fresh();
    const heard: NudgeTarget[] = [];
    let wake: (t: NudgeTarget) => void = () => {};
    const next = (target: NudgeTarget) => new Promise<void>((resolve) => (wake = (t) => t === target && resolve()));
    await store.ops.listen((t) => (heard.push(t), wake(t)));
    const other = await another();
    const c = await client(other);
    const submitter = next("submitter");
    const { task: t } = await other.tasks.create(task(c.id, "nudge"));
    if (name === "sqlite") {
      await other.tasks.transition(t, { status: "succeeded", phase: "done" }, opts());
      expect(heard).toEqual([]);
      return;
    }
    await submitter;
    const dispatcher = next("dispatcher");
    await other.tasks.transition(t, { status: "succeeded", phase: "done" }, opts());
    await dispatcher;
    expect(heard).toContain("submitter");
    expect(heard).toContain("dispatcher");
  });

  it("recover: events without a destination get theirs; a single process releases every lease, a shared store leaves them to expire", async () => {
    const { store } = await h.fresh();
    const { tasks } = await tasksOf(store, 2);
    await store.tasks.claimDue("waiting", "default", lease("dead:1", 1));
    const { events } = await eventsOf(store, 2, "https://hooks.example:8443/in");
    await claimEvents(store, "dead:2", { limit: 1 });
    await store.events.requeueLastOfTask(events[1]!.taskId, { destinationHost: "" });
    const released = await store.ops.recover(destinationHost);
    expect((await store.events.find(events[1]!.id))!.destinationHost).toBe("hooks.example:8443");
    const leases = [
      (await store.tasks.find(tasks[0]!.id))!.claimToken,
      (await store.events.find(events[0]!.id))!.claimToken,
    ];
    if (name === "sqlite") {
      expect(released).toBe(2);
      expect(leases).toEqual([null, null]);
    } else {
      expect(released).toBe(0);
      expect(leases).toEqual(["dead:1", "dead:2"]);
    }
  });

  it("releaseLeases: the leases of this process's tokens (prefix:n), of tasks and events, and no one else's", async () => {
    const store = await h.shared();
    const mine = fresh("own");
    const theirs = fresh("own");
    const { tasks } = await tasksOf(store, 3, fresh("acct"), { nextRunAt: NOW + 3_600_000 });
    await store.tasks.claimIds([tasks[0]!.id, tasks[1]!.id], "waiting", lease(`${mine}:1`));
    await store.tasks.claimIds([tasks[2]!.id], "waiting", lease(`${theirs}:1`));
    const { event, key } = await (async () => {
      const host = fresh("h");
      const { clientId, events } = await eventsOf(store, 1, `https://${host}.example/x`);
      return { event: events[0]!, key: { clientId, host: `${host}.example:443` } };
    })();
    await store.events.claimTrial(key, { now: NOW, leaseMs: 60_000, token: `${mine}:2` });
    expect(await store.ops.releaseLeases(mine)).toBe(3);
    expect((await store.tasks.find(tasks[0]!.id))!.claimToken).toBeNull();
    expect((await store.tasks.find(tasks[2]!.id))!.claimToken).toBe(`${theirs}:1`);
    expect((await store.events.find(event.id))!).toMatchObject({ claimToken: null, claimedUntil: null });
    expect(await store.ops.releaseLeases(mine)).toBe(0);
  });

  it("releaseLeases takes the prefix as it is: another case or a LIKE wildcard is another owner", async () => {
    const store = await h.shared();
    const owner = fresh("own");
    const { tasks } = await tasksOf(store, 1, fresh("acct"), { nextRunAt: NOW + 3_600_000 });
    await store.tasks.claimIds([tasks[0]!.id], "waiting", lease(`${owner}:1`));
    expect(await store.ops.releaseLeases(owner.toUpperCase())).toBe(0);
    expect(await store.ops.releaseLeases(`${owner.slice(0, -1)}_`)).toBe(0);
    expect(await store.ops.releaseLeases("%")).toBe(0);
    expect((await store.tasks.find(tasks[0]!.id))!.claimToken).toBe(`${owner}:1`);
  });

  it("probeWrite: null while storage takes writes, and it leaves nothing behind", async () => {
    const { store } = await h.fresh();
    expect(await store.ops.probeWrite(NOW)).toBeNull();
    expect(await store.ops.probeWrite(NOW + 1)).toBeNull();
    expect(await store.ops.gauges()).toEqual({ tasksByStatus: [], tasksByAccountPhase: [], eventsByStatus: [] });
  });

  it("gauges: tasks by status, waiting and running tasks by account, pending and failed events", async () => {
    const { store } = await h.fresh();
    const { tasks } = await tasksOf(store, 3, "acct-a");
    await tasksOf(store, 1, "acct-b");
    await store.tasks.transition(tasks[0]!, { status: "processing", phase: "submitted" }, opts());
    await store.tasks.transition(tasks[1]!, { status: "succeeded", phase: "done" }, opts());
    const [failing] = await claimEvents(store, "d:1", { limit: 1 });
    await store.events.release(failing!.id, "d:1", { deliveryStatus: "failed" });
    const g = await store.ops.gauges();
    const sorted = <T>(rows: T[]) => rows.map((r) => JSON.stringify(r)).sort();
    expect(sorted(g.tasksByStatus)).toEqual(
      sorted([
        { status: "queued", n: 2 },
        { status: "processing", n: 1 },
        { status: "succeeded", n: 1 },
      ]),
    );
    expect(sorted(g.tasksByAccountPhase)).toEqual(
      sorted([
        { account: "acct-a", phase: "waiting", n: 1 },
        { account: "acct-a", phase: "submitted", n: 1 },
        { account: "acct-b", phase: "waiting", n: 1 },
      ]),
    );
    expect(sorted(g.eventsByStatus)).toEqual(
      sorted([
        { status: "failed", n: 1 },
        { status: "pending", n: 1 },
      ]),
    );
  });

  it("close: every operation after it fails at once, none hangs", async () => {
    const store = name === "sqlite" ? memoryStore() : await (await h.fresh()).another();
    await store.close();
    await expect(store.tasks.find("task_x")).rejects.toThrow();
    await expect(store.clients.insert(newClient(NOW, { name: "late" }).row)).rejects.toThrow();
    await expect(store.events.feed("cli_x", 0, 10)).rejects.toThrow();
  });

  it("close twice is harmless (shutdown paths may both close)", async () => {
    const store = name === "sqlite" ? memoryStore() : await (await h.fresh()).another();
    await store.close();
    await store.close();
  });
});

describe("OpsStore with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [{ op: "releaseLeases(prefix)", run: (s, v) => s.ops.releaseLeases(v) }];

  const numbers: Array<Probe<number>> = [
    {
      op: "probeWrite(now)",
      global: true,
      run: async (s, v) => ((await s.ops.probeWrite(v)) === null ? "writable" : "not writable"),
    },
  ];
  suite.hostile(text, numbers);
});

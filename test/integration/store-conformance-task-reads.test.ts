import { describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { conformance, fixtures, type Probe } from "../helpers/conformance.js";

/** TaskStore conformance, reads (checklist: store-conformance.md): lookups, lists, counts and the dashboard's reads, on both drivers. */
const suite = conformance();
const { client, clientOn, fresh, lease, NOW, opts, task, tasksOf } = fixtures;
const ids = (rows: TaskRow[]) => rows.map((r) => r.id);

/** A new task of the client with `extra` in its row, created at `at`. */
async function taskOf(store: Store, clientId: string, extra: Partial<TaskRow> = {}, at = NOW): Promise<TaskRow> {
  const req = task(clientId, fresh("k"));
  req.row = { ...req.row, createdAt: at, ...extra };
  return (await store.tasks.create(req)).task;
}

describe.each(suite.dialects)("TaskStore reads on %s", (_name, h) => {
  it("find, filesOf, findOfClient and findByAnyId: by relay id, by upstream id (one per account), never another client's", async () => {
    const store = await h.shared();
    const c = await client(store);
    const upstreamId = fresh("up");
    const t = (await store.tasks.transition(await taskOf(store, c.id), { upstreamTaskId: upstreamId }, opts()))!;
    const other = await clientOn(store, fresh("acct"));
    const u = (await store.tasks.transition(
      await taskOf(store, other.id, { upstreamAccount: other.upstreamAccount }),
      { upstreamTaskId: upstreamId },
      opts(),
    ))!;
    expect(await store.tasks.find(t.id)).toEqual(t);
    expect(await store.tasks.findOfClient(c.id, t.id)).toEqual(t);
    expect(await store.tasks.findOfClient(other.id, t.id)).toBeUndefined();
    expect(await store.tasks.findByAnyId(t.id)).toEqual([t]);
    expect(await store.tasks.findByAnyId(upstreamId)).toEqual([t, u].sort((x, y) => (x.id < y.id ? -1 : 1)));
    expect(await store.tasks.findByAnyId("nothing")).toEqual([]);
    expect(await store.tasks.find("task_nobody")).toBeUndefined();
    // filesOf: the two columns a file link reads, alike on both drivers.
    const files = JSON.stringify([{ url: "https://x.example/a.png", key: "gen/a.png", sha256: "00" }]);
    const copied = (await store.tasks.transition(t, { filesJson: files }, opts()))!;
    expect(await store.tasks.filesOf(copied.id)).toEqual({ clientId: c.id, filesJson: files });
    expect(await store.tasks.filesOf(u.id)).toEqual({ clientId: other.id, filesJson: null });
    expect(await store.tasks.filesOf("task_nobody")).toBeUndefined();
  });

  it("list: the client's tasks newest first, paged by id, filtered by type, status and a search of ids and metadata values", async () => {
    const store = await h.shared();
    const c = await client(store);
    const a = await taskOf(store, c.id, { metadataJson: JSON.stringify({ order: "A-1" }) });
    const b = await taskOf(store, c.id, { type: "video" });
    const d = (await store.tasks.transition(
      await taskOf(store, c.id),
      { status: "failed", phase: "done", upstreamTaskId: fresh("up") },
      opts(),
    ))!;
    await taskOf(store, (await client(store)).id, { metadataJson: JSON.stringify({ order: "A-1" }) });
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10 }))).toEqual([d.id, b.id, a.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 2 }))).toEqual([d.id, b.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, beforeId: b.id }))).toEqual([a.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, type: "video" }))).toEqual([b.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, status: "failed" }))).toEqual([d.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, search: "A-1" }))).toEqual([a.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, search: d.upstreamTaskId! }))).toEqual([d.id]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, search: b.id }))).toEqual([b.id]);
    expect(await store.tasks.list({ clientId: c.id, limit: 10, search: "order" })).toEqual([]);
    expect(ids(await store.tasks.list({ clientId: c.id, limit: 10, deliveryFailing: true }))).toEqual([]);
  });

  it("listForSupport: every client's tasks newest first, or one client's, or one status, up to the limit", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const other = await client(store);
    const a = await taskOf(store, c.id);
    const b = await taskOf(store, other.id);
    const d = (await store.tasks.transition(await taskOf(store, c.id), { status: "canceled", phase: "done" }, opts()))!;
    expect(ids(await store.tasks.listForSupport({ limit: 10 }))).toEqual([d.id, b.id, a.id]);
    expect(ids(await store.tasks.listForSupport({ limit: 1 }))).toEqual([d.id]);
    expect(ids(await store.tasks.listForSupport({ clientId: c.id, limit: 10 }))).toEqual([d.id, a.id]);
    expect(ids(await store.tasks.listForSupport({ clientId: c.id, status: "queued", limit: 10 }))).toEqual([a.id]);
  });

  it("waitingAhead and unsubmittedOfClient", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    const { clientId, tasks } = await tasksOf(store, 4, account);
    await tasksOf(store, 2, fresh("acct"));
    await store.tasks.transition(tasks[0]!, { status: "processing", phase: "submitted" }, opts());
    await store.tasks.transition(tasks[1]!, { submitAttempts: 1 }, opts());
    await store.tasks.claimIds([tasks[2]!.id], "waiting", lease("w:1"));
    expect(await store.tasks.waitingAhead(account, tasks[3]!.id)).toBe(2);
    expect(await store.tasks.waitingAhead(account, tasks[0]!.id)).toBe(0);
    // The list page's form: every asked id still waiting, with the count a single waitingAhead gives.
    const each = await store.tasks.waitingAheadOfEach(account, [tasks[3]!.id, tasks[0]!.id, tasks[1]!.id]);
    expect(Object.fromEntries(each)).toEqual({ [tasks[1]!.id]: 0, [tasks[3]!.id]: 2 });
    for (const [id, ahead] of each) expect(await store.tasks.waitingAhead(account, id)).toBe(ahead);
    expect((await store.tasks.waitingAheadOfEach(account, [])).size).toBe(0);
    expect(ids(await store.tasks.unsubmittedOfClient(clientId, NOW))).toEqual([tasks[3]!.id]);
    expect(ids(await store.tasks.unsubmittedOfClient(clientId, NOW + 30_001)).sort()).toEqual(
      [tasks[2]!.id, tasks[3]!.id].sort(),
    );
  });

  it("waitingAhead counts alike with few tasks after the id and with hundreds (the two ways SQLite counts)", async () => {
    const store = await h.shared();
    const account = fresh("acct");
    const early = (await tasksOf(store, 3, account)).tasks;
    await store.tasks.transition(early[1]!, { status: "processing", phase: "submitted" }, opts());
    const mid = (await tasksOf(store, 1, account)).tasks[0]!;
    // Few after `mid`: its waiting tasks of the account before it (early[0], early[2]).
    expect(await store.tasks.waitingAhead(account, mid.id)).toBe(2);
    // Hundreds after it: of other accounts, of this one (waiting and not), past SQLite's scan of newer tasks.
    const other = await client(store);
    for (let i = 0; i < 13; i++) {
      // Made in order (their ids), created 20 at a time.
      const reqs = Array.from({ length: 20 }, () => task(other.id, fresh("k")));
      await Promise.all(reqs.map((req) => store.tasks.create(req)));
    }
    const late = (await tasksOf(store, 4, account)).tasks;
    await store.tasks.transition(late[0]!, { status: "canceled", phase: "done" }, opts());
    expect(await store.tasks.waitingAhead(account, early[0]!.id)).toBe(0);
    expect(await store.tasks.waitingAhead(account, mid.id)).toBe(2);
    expect(await store.tasks.waitingAhead(account, late[3]!.id)).toBe(5);
    expect(await store.tasks.waitingAhead(account, "task_zzz")).toBe(6);
    expect(await store.tasks.waitingAhead(account, "task_")).toBe(0);
    // An id with NUL equals and orders against no stored id (the store's value rules): none ahead.
    expect(await store.tasks.waitingAhead(account, "task_zzz\u0000")).toBe(0);
  });

  it("countsOfClient, hourlyCounts and recentCallbackUrls", async () => {
    const store = await h.shared();
    const c = await client(store);
    const HOUR = 3_600_000;
    const t0 = NOW - 2 * HOUR;
    await taskOf(store, c.id, { callbackUrl: "https://a.example/x" }, t0 + 5);
    await taskOf(store, c.id, { callbackUrl: null }, t0 + 10);
    const late = await taskOf(store, c.id, { callbackUrl: "https://b.example/y" }, t0 + HOUR + 1);
    await store.tasks.transition(late, { status: "succeeded", phase: "done" }, opts());
    await taskOf(store, c.id, { callbackUrl: "https://a.example/x" }, t0 + HOUR + 2);
    expect(await store.tasks.countsOfClient(c.id)).toEqual({
      queued: 3,
      processing: 0,
      succeeded: 1,
      failed: 0,
      canceled: 0,
    });
    expect(await store.tasks.countsOfClient("cli_nobody")).toEqual({
      queued: 0,
      processing: 0,
      succeeded: 0,
      failed: 0,
      canceled: 0,
    });
    const hourly = await store.tasks.hourlyCounts(c.id, t0 + 6);
    expect(hourly.sort((x, y) => x.hour - y.hour || x.status.localeCompare(y.status))).toEqual([
      { hour: t0, status: "queued", n: 1 },
      { hour: t0 + HOUR, status: "queued", n: 1 },
      { hour: t0 + HOUR, status: "succeeded", n: 1 },
    ]);
    expect(await store.tasks.recentCallbackUrls(c.id)).toEqual(["https://a.example/x", "https://b.example/y"]);
    expect(await store.tasks.recentCallbackUrls("cli_nobody")).toEqual([]);
  });
});

describe("TaskStore reads with hostile values: both drivers answer alike", () => {
  const text: Array<Probe<string>> = [
    { op: "find", run: (s, v) => s.tasks.find(v) },
    { op: "filesOf", run: (s, v) => s.tasks.filesOf(v) },
    { op: "findOfClient(id)", run: async (s, v) => s.tasks.findOfClient((await client(s)).id, v) },
    { op: "findOfClient(clientId)", run: async (s, v) => s.tasks.findOfClient(v, (await tasksOf(s, 1)).tasks[0]!.id) },
    { op: "findByAnyId", run: (s, v) => s.tasks.findByAnyId(v) },
    {
      op: "list(search)",
      run: async (s, v) => s.tasks.list({ clientId: (await tasksOf(s, 1)).clientId, limit: 10, search: v }),
    },
    {
      op: "list(beforeId past every id)",
      run: async (s, v) =>
        (await s.tasks.list({ clientId: (await tasksOf(s, 1)).clientId, limit: 10, beforeId: `zz${v}` })).length,
    },
    { op: "listForSupport(clientId)", run: (s, v) => s.tasks.listForSupport({ clientId: v, limit: 10 }) },
    { op: "waitingAhead(account)", run: (s, v) => s.tasks.waitingAhead(v, "task_zzz") },
    {
      op: "waitingAheadOfEach(account, ids)",
      run: async (s, v) => [...(await s.tasks.waitingAheadOfEach(v, [v, "task_zzz"]))],
    },
    { op: "unsubmittedOfClient", run: (s, v) => s.tasks.unsubmittedOfClient(v, NOW) },
    { op: "countsOfClient", run: (s, v) => s.tasks.countsOfClient(v) },
    { op: "hourlyCounts", run: (s, v) => s.tasks.hourlyCounts(v, 0) },
    { op: "recentCallbackUrls", run: (s, v) => s.tasks.recentCallbackUrls(v) },
  ];

  const numbers: Array<Probe<number>> = [
    {
      op: "list(limit)",
      run: async (s, v) => (await s.tasks.list({ clientId: (await tasksOf(s, 2)).clientId, limit: v })).length,
    },
    {
      op: "listForSupport(limit)",
      run: async (s, v) =>
        (await s.tasks.listForSupport({ clientId: (await tasksOf(s, 2)).clientId, limit: v })).length,
    },
    {
      op: "hourlyCounts(since)",
      run: async (s, v) => (await s.tasks.hourlyCounts((await tasksOf(s, 1)).clientId, v)).length,
    },
    {
      op: "unsubmittedOfClient(now)",
      run: async (s, v) => (await s.tasks.unsubmittedOfClient((await tasksOf(s, 1)).clientId, v)).length,
    },
  ];
  suite.hostile(text, numbers);
});

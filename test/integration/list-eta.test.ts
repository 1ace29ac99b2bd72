import { afterEach, describe, expect, it, vi } from "vitest";
import type { Config } from "../../src/config.js";
import { getTaskView, listTaskViews } from "../../src/services/tasks.js";
import type { Store } from "../../src/store/store.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { CONTRACT_NOW, contractClient, contractTask, storeDialects } from "../helpers/store-dialects.js";

// estimated_completion_at of WAITING tasks in list items (docs/contract.md, "When will it finish"):
// the same as the single-task read shows, from one grouped position query per upstream account on
// the page, however many waiting items it holds.
let cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const fn of cleanups.reverse()) await fn();
  cleanups = [];
});
const dialects = storeDialects((fn) => cleanups.push(fn));

describe.each(dialects)("list items' estimates of waiting tasks on %s", (_name, open) => {
  it("match the single-task read, with a constant number of position queries per page", async () => {
    const { store } = await open();
    const clock = new FakeClock(CONTRACT_NOW + 60_000);
    // Two tasks at a time per account: a waiting task's estimate grows by one median per round ahead.
    const deps = { store, clock, config: { upstreamMaxConcurrent: 2 } as Config };
    const mine = await contractClient(store);
    const other = await contractClient(store);
    const create = async (clientId: string, key: string, account = "default") => {
      const req = contractTask(clientId, key);
      req.row = { ...req.row, upstreamAccount: account };
      return (await store.tasks.create(req)).task;
    };
    // Another client's task ahead in the same queue counts for the place, not for the list.
    await create(other.id, "o1");
    const running = await create(mine.id, "k0");
    await store.tasks.transition(
      running,
      { status: "processing", phase: "submitted", submittedAt: CONTRACT_NOW + 30_000 },
      { now: CONTRACT_NOW + 30_000, token: null, firstAttemptDelayMs: 0 },
    );
    const ids = new Map<string, string>();
    for (let i = 1; i <= 4; i++) ids.set(`k${i}`, (await create(mine.id, `k${i}`)).id);
    for (let i = 1; i <= 2; i++) ids.set(`s${i}`, (await create(mine.id, `s${i}`, "second")).id);
    await store.accounts.saveDurationSamples("image", "p-image", [8_000, 10_000, 30_000], clock.now());

    const counted = spyPositions(store);
    const page = await listTaskViews(deps, mine.id, { limit: 100 });
    expect(page.data).toHaveLength(7);
    expect(counted()).toEqual({ grouped: 2, single: 0 });
    const waiting = page.data.filter((t) => t.status === "queued");
    expect(waiting).toHaveLength(6);
    for (const item of page.data) {
      const read = await getTaskView(deps, mine.id, item.id);
      expect(item.estimated_completion_at, item.id).toBe(read.data.estimated_completion_at);
      expect(item.estimated_completion_at, item.id).not.toBeNull();
    }
    // Places 2..5 on "default" (the other client's task first): rounds of two, one median each.
    const eta = new Map(page.data.map((t) => [t.id, t.estimated_completion_at]));
    const byKey = { get: (key: string) => eta.get(ids.get(key)!) };
    const at = (rounds: number) => new Date(clock.now() + rounds * 10_000).toISOString();
    expect([1, 2, 3, 4].map((i) => byKey.get(`k${i}`))).toEqual([at(1.5), at(2), at(2.5), at(3)]);
    expect([1, 2].map((i) => byKey.get(`s${i}`))).toEqual([at(1), at(1.5)]);

    // Three times the waiting items: still one position query per account on the page.
    for (let i = 5; i <= 16; i++) ids.set(`k${i}`, (await create(mine.id, `k${i}`)).id);
    counted.reset();
    const bigger = await listTaskViews(deps, mine.id, { limit: 100 });
    expect(bigger.data.filter((t) => t.status === "queued")).toHaveLength(18);
    expect(counted()).toEqual({ grouped: 2, single: 0 });
    const last = bigger.data.find((t) => t.id === ids.get("k16"))!;
    expect(last.estimated_completion_at).toBe((await getTaskView(deps, mine.id, last.id)).data.estimated_completion_at);
  });
});

/** Counts the store's position queries: grouped (one per account on a page) and single (one per task). */
function spyPositions(store: Store) {
  const grouped = vi.spyOn(store.tasks, "waitingAheadOfEach");
  const single = vi.spyOn(store.tasks, "waitingAhead");
  return Object.assign(() => ({ grouped: grouped.mock.calls.length, single: single.mock.calls.length }), {
    reset: () => {
      grouped.mockClear();
      single.mockClear();
    },
  });
}

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "../../src/services/clients.js";
import type { Store } from "../../src/store/store.js";
import { LEADER_RECHECK_MS } from "../../src/workers/leadership.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { crash, createVia, round, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { startReceiver, type Receiver } from "../helpers/receiver.js";

/**
 * Planning once per cluster, not per instance (issue #32, deliverable 3): with several relays on one
 * PostgreSQL database, only the instance that leads the upstream account runs the submitter's and
 * the poller's planning queries (which tasks are due, counts, due times, the read budget, the
 * claims); the others run none of them, whatever they are nudged with (every creation on any
 * instance wakes every submitter through NOTIFY). They only watch the leases, in one statement
 * every LEADER_RECHECK_MS, and the planning moves with the leadership: to an instance that takes a
 * frozen leader's account over once its lease lapses, and to another when that one is killed.
 *
 * The planning queries are counted per instance by wrapping its store's methods, the way
 * pg_stat_statements would count their statements (only the workers' calls: a creation's answer
 * reads the account's state too).
 */
const PLANNING = {
  tasks: [
    "accountsWithDue",
    "accountsInFlight",
    "nextDueAt",
    "nextExpiryAt",
    "claimExpired",
    "countRunning",
    "listInFlight",
    "claimFairly",
    "claimDue",
    "claimIds",
  ],
  accounts: ["state", "readsSince"],
} as const;

/** Whether the workers' rounds run (intake outside them reads some of the same methods for its answers). */
let inRound = false;
async function workerRound(instances: Instance[]): Promise<void> {
  inRound = true;
  try {
    await round(instances);
  } finally {
    inRound = false;
  }
}

/** Counts each call of the planning methods on the store made by the workers, by name. */
function countPlanning(store: Store): Map<string, number> {
  const counts = new Map<string, number>();
  for (const [area, names] of Object.entries(PLANNING)) {
    const target = store[area as keyof typeof PLANNING] as unknown as Record<string, (...a: unknown[]) => unknown>;
    for (const name of names) {
      const original = target[name]!.bind(target);
      target[name] = (...args: unknown[]) => {
        if (inRound) counts.set(name, (counts.get(name) ?? 0) + 1);
        return original(...args);
      };
    }
  }
  return counts;
}

const total = (counts: Map<string, number>) => [...counts.values()].reduce((a, b) => a + b, 0);

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("planning once per cluster: only the account's leader plans", () => {
  it("three instances, a frozen leader then a killed one: no query of planning on a non-leader, and planning moves with the lease within its time", async () => {
    const db = await freshPgDatabase();
    const clock = new FakeClock(Date.UTC(2026, 0, 1));
    const upstream = simulatedUpstream(clock);
    const receiver: Receiver = await startReceiver();
    const instances: Instance[] = [];
    const frozen = new pg.Client({ connectionString: db.url, application_name: "genrelay-frozen" });
    frozen.on("error", () => {});
    cleanups.push(async () => {
      for (const i of instances) if (i.alive) await crash(i);
      for (const i of instances) i.relay.leadership.close();
      await frozen.end().catch(() => {});
      await receiver.close();
      await db.drop();
    });

    // A leader that froze: its lease row for the account, held by a connection that stays idle.
    const LEASE_MS = 1_500;
    await frozen.connect();
    const dbNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    await frozen.query(
      `INSERT INTO account_leaders (account, holder, fence, expires_at, holder_pid, taken_at) VALUES ('default', 'frozen', 1, ${dbNow} + $1, pg_backend_pid(), ${dbNow})`,
      [LEASE_MS],
    );
    const frozenAt = performance.now();
    for (let n = 0; n < 3; n++) instances.push(await startInstance(db.url, clock, upstream.fetch));
    const counts = instances.map((i) => countPlanning(i.store));
    const { apiKey } = await createClient({ store: instances[0]!.store, clock }, { name: "planning" });

    const ids: string[] = [];
    for (let n = 0; n < 30; n++)
      ids.push(await createVia(instances[n % 3]!, apiKey, n, receiver.url("/hook"), "planning-task"));
    const delivered = () =>
      new Set(receiver.requests.filter((r) => r.json.type === "task.succeeded").map((r) => r.json.data.id as string));
    const leaderIndex = () => counts.findIndex((c, i) => instances[i]!.alive && total(c) > 0);

    // While the frozen leader's lease runs, no instance leads the account: none plans, though every
    // creation nudged every submitter.
    while (performance.now() - frozenAt < LEASE_MS - 300) {
      await workerRound(instances);
      clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(counts.map(total)).toEqual([0, 0, 0]);

    // Once it lapses, one instance takes the account over (the watch looks every LEADER_RECHECK_MS)
    // and from then on plans alone: the others issue no planning query while every task is
    // submitted, polled and delivered.
    let tookAfter: number | null = null;
    for (let step = 0; step < 2_000 && delivered().size < ids.length; step++) {
      await workerRound(instances);
      if (tookAfter === null && leaderIndex() >= 0) tookAfter = performance.now() - frozenAt;
      clock.advance(1_000);
      if (tookAfter === null) await new Promise((r) => setTimeout(r, 50));
    }
    expect(delivered()).toEqual(new Set(ids));
    expect(tookAfter).not.toBeNull();
    expect(tookAfter!).toBeGreaterThan(LEASE_MS - 300);
    expect(tookAfter!).toBeLessThan(LEASE_MS + LEADER_RECHECK_MS + 1_500);
    const first = leaderIndex();
    expect(counts[first]!.get("accountsWithDue")).toBeGreaterThan(0);
    expect(counts[first]!.get("accountsInFlight")).toBeGreaterThan(0);
    expect(counts.map(total).filter((n) => n > 0)).toHaveLength(1);
    expect(await instances[first]!.relay.leadership.leads("default")).toBe(true);
    // The frozen leader's sessions were ended at the takeover.
    await expect(frozen.query("SELECT 1")).rejects.toThrow();

    // The leader is killed (its connections gone): another instance takes the account over at its
    // next look, without waiting for the lease, and plans the next tasks alone.
    await crash(instances[first]!);
    const killedAt = performance.now();
    const before = counts.map(total);
    const more: string[] = [];
    const survivors = instances.filter((i) => i.alive);
    for (let n = 30; n < 40; n++)
      more.push(await createVia(survivors[n % 2]!, apiKey, n, receiver.url("/hook"), "planning-task"));
    let handedAfter: number | null = null;
    const planned = () => counts.map((c, i) => total(c) - before[i]!);
    for (let step = 0; step < 2_000 && [...more].some((id) => !delivered().has(id)); step++) {
      await workerRound(instances);
      if (handedAfter === null && planned().some((n, i) => n > 0 && instances[i]!.alive))
        handedAfter = performance.now() - killedAt;
      clock.advance(1_000);
      if (handedAfter === null) await new Promise((r) => setTimeout(r, 50));
    }
    expect(more.every((id) => delivered().has(id))).toBe(true);
    expect(handedAfter).not.toBeNull();
    expect(handedAfter!).toBeLessThan(LEADER_RECHECK_MS + 1_500);
    const after = planned();
    expect(after[first]).toBe(0);
    expect(after.filter((n) => n > 0)).toHaveLength(1);
    // One upstream creation per task throughout.
    expect(upstream.log.creates).toHaveLength(ids.length + more.length);
  }, 120_000);
});

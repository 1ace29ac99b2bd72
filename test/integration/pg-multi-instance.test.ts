import { afterEach, describe, expect, it } from "vitest";
import { maxInWindow } from "../../src/bench/scheduling-sim.js";
import { createClient } from "../../src/services/clients.js";
import { LEADER_RECHECK_MS } from "../../src/workers/leadership.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { crash, createVia, round, simulatedUpstream, startInstance, type Instance } from "../helpers/pg-relays.js";
import { startReceiver, type Receiver } from "../helpers/receiver.js";

/**
 * Several relay instances on one PostgreSQL database, in one process on one fake clock: the logic
 * of sharing (claims, leadership, the read budget, the feed) under real concurrent transactions.
 * The process-level crash (kill -9 of real processes) is test/e2e/pg-crash.test.ts.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(count: number) {
  const db = await freshPgDatabase();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const receiver: Receiver = await startReceiver();
  const instances: Instance[] = [];
  for (let i = 0; i < count; i++) instances.push(await startInstance(db.url, clock, upstream.fetch));
  cleanups.push(async () => {
    for (const i of instances) if (i.alive) await crash(i);
    await receiver.close();
    await db.drop();
  });
  const { apiKey } = await createClient({ store: instances[0]!.store, clock }, { name: "multi" });
  return { db, clock, upstream, receiver, instances, apiKey };
}

describe("several instances on one PostgreSQL database", () => {
  it("three instances share 60 tasks; the account leader dies mid-work: one creation per task, every webhook arrives, reads within budget, no feed gap", async () => {
    const { clock, upstream, receiver, instances, apiKey } = await setup(3);
    const ids: string[] = [];
    for (let n = 0; n < 60; n++)
      ids.push(await createVia(instances[n % 3]!, apiKey, n, receiver.url("/hook"), "multi-task"));

    // Exactly one instance leads the default account.
    const leaders = await Promise.all(instances.map((i) => i.relay.leadership.leads("default")));
    expect(leaders.filter(Boolean)).toHaveLength(1);
    const leader = instances[leaders.indexOf(true)]!;

    let crashed = false;
    const delivered = () =>
      new Set(receiver.requests.filter((r) => r.json.type === "task.succeeded").map((r) => r.json.data.id as string));
    for (let step = 0; step < 400 && delivered().size < ids.length; step++) {
      await round(instances);
      // Once some tasks are upstream, the leader dies like a kill -9: leases held, connections gone.
      if (!crashed && upstream.log.creates.length >= 20) {
        await crash(leader);
        crashed = true;
        // The others look at the leases every LEADER_RECHECK_MS of real time (they plan nothing meanwhile).
        const survivors = instances.filter((i) => i.alive);
        const deadline = performance.now() + LEADER_RECHECK_MS + 3_000;
        while (!(await Promise.all(survivors.map((i) => i.relay.leadership.leads("default")))).some(Boolean)) {
          if (performance.now() > deadline) throw new Error("no instance took the account over");
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      clock.advance(1_000);
    }
    expect(crashed).toBe(true);
    expect(delivered()).toEqual(new Set(ids));
    // One upstream creation per task (its fixed key), whoever submitted it.
    expect(upstream.log.creates).toHaveLength(ids.length);
    expect(new Set(upstream.log.creates).size).toBe(ids.length);
    // All instances together stayed within the read budget in every 60 s window.
    expect(maxInWindow(upstream.log.reads, 60_000)).toBeLessThanOrEqual(100);
    expect(upstream.state.stats().rate_limited).toBe(0);
    // Another instance took the account over.
    const survivors = instances.filter((i) => i.alive);
    expect((await Promise.all(survivors.map((i) => i.relay.leadership.leads("default")))).filter(Boolean)).toHaveLength(
      1,
    );
    // The client's feed has every event, positions 1..N without a gap.
    const feed = await survivors[0]!.store.events.feed((await survivors[0]!.store.clients.list())[0]!.id, 0, 1_000);
    expect(feed.map((e) => e.clientSeq)).toEqual(feed.map((_, i) => i + 1));
    expect(new Set(feed.filter((e) => e.type === "task.succeeded").map((e) => e.taskId))).toEqual(new Set(ids));
  });
});

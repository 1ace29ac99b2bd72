import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { LeaderFence, Store } from "../../src/store/store.js";
import { eventsOf, fresh, lease as leaseAt, NOW, opts, tasksOf } from "../helpers/conformance.js";
import { pgDatabasePerFile } from "../helpers/pg.js";

/**
 * Account leadership on PostgreSQL (src/db/pg/leadership.ts; docs/contract.md, "A frozen instance
 * loses its roles"): a lease row per account on the database's clock, renewed by its leader, with a
 * fence that claims made as leader carry.
 *
 * A frozen process (SIGSTOP, a stalled event loop) looks to the server like an open connection
 * that sends nothing: here a connection of the test's own holds a lease row and stays idle, which
 * is exactly what such a process leaves (test/e2e/pg-frozen-leader.test.ts stops real relays).
 */

/** A claim's options once every task of tasksOf is due (the i-th is due at NOW + i). */
const lease = (token: string, limit = 100) => leaseAt(token, limit, NOW + 10);

const file = pgDatabasePerFile();
const store = () => file.store();
const frozen: pg.Client[] = [];

afterEach(async () => {
  for (const c of frozen.splice(0)) await c.end().catch(() => {});
});

/**
 * A leader that stopped: its lease row (fence, `leaseMs` from now on the database's clock) held by
 * a connection that stays open and idle, as a SIGSTOPped process's does (named like a store's
 * connections, `genrelay-…`, unless `app` says otherwise).
 */
async function frozenLeader(
  account: string,
  holder: string,
  fence: number,
  leaseMs: number,
  app = `genrelay-${holder}`,
): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: file.url, application_name: app });
  c.on("error", () => {});
  await c.connect();
  frozen.push(c);
  const now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
  await c.query(
    `INSERT INTO account_leaders (account, holder, fence, expires_at, holder_pid, taken_at) VALUES ($1, $2, $3, ${now} + $4, pg_backend_pid(), ${now})`,
    [account, holder, fence, leaseMs],
  );
  return c;
}

/** Asks every `everyMs` until `s` leads the account; resolves with its fence and how long it took. */
async function takeOver(
  s: Store,
  account: string,
  holder: string,
  leaseMs: number,
  withinMs: number,
  everyMs = 25,
): Promise<{ fence: LeaderFence; ms: number }> {
  const start = performance.now();
  for (;;) {
    const fence = await s.ops.leads(account, { holder, leaseMs });
    if (fence) return { fence, ms: performance.now() - start };
    if (performance.now() - start > withinMs)
      throw new Error(`${holder} did not take ${account} over within ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

describe("account leadership on PostgreSQL: a lease with a fence", () => {
  it("a frozen leader loses the account once its lease lapses: the next leader's fence is higher, the frozen one's sessions end and its leases are released, its claims and late writes change nothing", async () => {
    const b = await store();
    const account = fresh("acct");
    const { tasks } = await tasksOf(b, 3, account);
    const LEASE = 1_500;
    await frozenLeader(account, "frozen", 7, LEASE);
    // Another session of the frozen process, stopped inside a transaction that holds a task's row lock.
    const inTx = new pg.Client({ connectionString: file.url, application_name: "genrelay-frozen" });
    await inTx.connect();
    inTx.on("error", () => {});
    frozen.push(inTx);
    await inTx.query("BEGIN");
    await inTx.query("SELECT id FROM tasks WHERE id = $1 FOR UPDATE", [tasks[2]!.id]);
    const old = { account, fence: 7 };
    // While its lease runs, it claims as leader and nobody else leads.
    const claimed = await b.tasks.claimDue("waiting", account, { ...lease("frozen:1", 2), fence: old });
    expect(claimed.map((t) => t.id)).toEqual([tasks[0]!.id, tasks[1]!.id]);
    expect(await b.ops.leads(account, { holder: "live", leaseMs: 20_000 })).toBeNull();

    // It renews nothing: the live process takes over once the lease has lapsed, not before.
    const { fence, ms } = await takeOver(b, account, "live", 20_000, LEASE + 2_000);
    expect(fence).toEqual({ account, fence: 8 });
    expect(ms).toBeGreaterThan(LEASE - 300);
    // Its task leases went with it: claimable at once by the new leader, not when each lease ends.
    expect((await b.tasks.find(tasks[0]!.id))!).toMatchObject({ claimToken: null, claimedUntil: null });
    // So did its sessions, and the row lock its transaction held (not after its idle-in-transaction timeout).
    const sessions = await file.admin.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'genrelay-frozen'",
    );
    expect(sessions.rows[0].n).toBe(0);
    const unlocked = performance.now();
    await b.tasks.reschedule(tasks[2]!.id, "nobody", {});
    await file.admin.query("SELECT id FROM tasks WHERE id = $1 FOR UPDATE NOWAIT", [tasks[2]!.id]);
    expect(performance.now() - unlocked).toBeLessThan(1_000);

    // Resumed, the old leader claims nothing with its fence, and its writes under its leases change nothing.
    expect(await b.tasks.claimDue("waiting", account, { ...lease("frozen:2"), fence: old })).toEqual([]);
    expect(await b.tasks.claimFairly(account, { ...lease("frozen:3"), fence: old })).toEqual([]);
    expect(await b.tasks.claimIds([tasks[2]!.id], "waiting", { ...lease("frozen:4"), fence: old })).toEqual([]);
    const mine = await b.tasks.claimDue("waiting", account, { ...lease("live:1"), fence });
    expect(mine.map((t) => t.id).sort()).toEqual(tasks.map((t) => t.id).sort());
    expect(
      await b.tasks.transition(claimed[0]!, { status: "failed", phase: "done", completedAt: NOW }, opts("frozen:1")),
    ).toBeUndefined();
    expect(await b.tasks.reschedule(claimed[1]!.id, "frozen:1", { nextRunAt: NOW + 1 })).toBeUndefined();
    expect(await b.tasks.find(tasks[0]!.id)).toMatchObject({
      status: "queued",
      phase: "waiting",
      claimToken: "live:1",
    });
  });

  it("a live leader keeps the account past its lease length by renewing it; when it closes, another takes over at once", async () => {
    const [a, b] = [await store(), await store()];
    const account = fresh("acct");
    const first = await a.ops.leads(account, { holder: "a", leaseMs: 600 });
    expect(first).toEqual({ account, fence: 1 });
    // Three lease lengths later a still leads (renewed every 200 ms in the background), with the same fence.
    const until = performance.now() + 1_800;
    while (performance.now() < until) {
      expect(await b.ops.leads(account, { holder: "b", leaseMs: 600 })).toBeNull();
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await a.ops.leads(account, { holder: "a", leaseMs: 600 })).toEqual(first);
    await a.close();
    expect(await b.ops.leads(account, { holder: "b", leaseMs: 600 })).toEqual({ account, fence: 2 });
  });

  it("a previous holder's sessions are ended only when they are a store's (genrelay-…), never this store's own", async () => {
    const b = await store();
    const account = fresh("acct");
    const other = await frozenLeader(account, "other-app", 1, 0, "not-genrelay");
    await takeOver(b, account, "live", 20_000, 2_000);
    expect((await other.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
  });

  it("a killed leader (its connection gone) is taken over at once, without waiting for its lease", async () => {
    const b = await store();
    const account = fresh("acct");
    const { tasks } = await tasksOf(b, 1, account);
    const dead = await frozenLeader(account, "killed", 3, 60_000);
    await b.tasks.claimDue("waiting", account, { ...lease("killed:1"), fence: { account, fence: 3 } });
    expect(await b.ops.leads(account, { holder: "live", leaseMs: 20_000 })).toBeNull();
    await dead.end();
    // The server notices the closed socket at once; its backend is gone within milliseconds.
    const { fence, ms } = await takeOver(b, account, "live", 20_000, 2_000);
    expect(fence).toEqual({ account, fence: 4 });
    expect(ms).toBeLessThan(2_000);
    expect((await b.tasks.find(tasks[0]!.id))!.claimToken).toBeNull();
  });

  it("a leader that still believes it leads after its lease was taken claims nothing with its stale fence, and learns it lost at its next renewal", async () => {
    const [a, b] = [await store(), await store()];
    const account = fresh("acct");
    await tasksOf(b, 2, account);
    const stale = (await a.ops.leads(account, { holder: "a", leaseMs: 900 }))!;
    // As if a had been frozen past its lease on the database's clock while its own clock said otherwise.
    await file.admin.query("UPDATE account_leaders SET expires_at = 0 WHERE account = $1", [account]);
    const taken = (await b.ops.leads(account, { holder: "b", leaseMs: 20_000 }))!;
    expect(taken.fence).toBe(stale.fence + 1);
    expect(await a.tasks.claimDue("waiting", account, { ...lease("a:1"), fence: stale })).toEqual([]);
    // Its background renewal (every 300 ms) finds the fence moved on: it no longer leads.
    const until = performance.now() + 1_000;
    let now = await a.ops.leads(account, { holder: "a", leaseMs: 900 });
    while (now && performance.now() < until) {
      await new Promise((r) => setTimeout(r, 50));
      now = await a.ops.leads(account, { holder: "a", leaseMs: 900 });
    }
    expect(now).toBeNull();
    expect(await b.tasks.claimDue("waiting", account, { ...lease("b:1"), fence: taken })).toHaveLength(2);
  });

  it("one process asking twice at once (its submitter and poller) takes the account once: one fence for both", async () => {
    const a = await store();
    const account = fresh("acct");
    const both = await Promise.all([
      a.ops.leads(account, { holder: "a", leaseMs: 20_000 }),
      a.ops.leads(account, { holder: "a", leaseMs: 20_000 }),
    ]);
    expect(both).toEqual([
      { account, fence: 1 },
      { account, fence: 1 },
    ]);
    expect(
      (await file.admin.query("SELECT fence::int AS fence FROM account_leaders WHERE account = $1", [account])).rows,
    ).toEqual([{ fence: 1 }]);
  });

  it("two processes asking at once for a lapsed lease: exactly one gets it", async () => {
    const stores3 = [await store(), await store(), await store()];
    const account = fresh("acct");
    await frozenLeader(account, "frozen", 1, 0);
    const got = await Promise.all(stores3.map((s, i) => s.ops.leads(account, { holder: `p${i}`, leaseMs: 20_000 })));
    expect(got.filter(Boolean)).toEqual([{ account, fence: 2 }]);
  });
});

describe("locks a frozen process holds on PostgreSQL end on the server's side", () => {
  it("a store that stops making progress while it holds a transaction's row lock loses it within 10 s; other stores' writes then go ahead, and their event claims never wait for it", async () => {
    const [a, b] = [await store(), await store()];
    const { clientId } = await eventsOf(a, 2, "https://hooks.example:443/hook");
    const key = { clientId, host: "hooks.example:443" };
    const { tasks } = await tasksOf(a, 1, fresh("acct"));
    // a claims (no lock outlives a claim's statement), then takes a task's row lock in a
    // transaction and sends nothing more on its connection, as a frozen process would.
    expect(
      await a.events.claimOfKey(key, { now: NOW, leaseMs: 30_000, token: "a:1", limit: 1, maxPerKey: 5 }),
    ).toHaveLength(1);
    let thaw: () => void = () => {};
    const frozenUntil = new Promise<void>((r) => (thaw = r));
    let locked: () => void = () => {};
    const rowLocked = new Promise<void>((r) => (locked = r));
    const inTx = a.tx(async (c) => {
      await c.query("SELECT id FROM tasks WHERE id = $1 FOR UPDATE", [tasks[0]!.id]);
      locked();
      await frozenUntil;
    });
    await rowLocked;
    const timed = async <T>(work: Promise<T>) => {
      const start = performance.now();
      const result = await work;
      return { result, ms: performance.now() - start };
    };
    const [claims, write] = await Promise.all([
      timed(b.events.claimOfKey(key, { now: NOW, leaseMs: 30_000, token: "b:1", limit: 5, maxPerKey: 5 })),
      timed(b.tasks.transition(tasks[0]!, { status: "canceled", phase: "done", completedAt: NOW }, opts())),
    ]);
    expect(claims.result).toHaveLength(1);
    expect(claims.ms).toBeLessThan(2_000);
    expect(write.result).toMatchObject({ status: "canceled" });
    expect(write.ms).toBeGreaterThan(8_000);
    expect(write.ms).toBeLessThan(14_000);
    thaw();
    await Promise.allSettled([inTx]);
  }, 30_000);
});

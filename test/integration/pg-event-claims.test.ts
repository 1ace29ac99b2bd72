import pg from "pg";
import { describe, expect, it } from "vitest";
import { redeliverLast } from "../../src/core/delivery.js";
import type { Store } from "../../src/store/store.js";
import { attemptOf, eventsOf, NOW } from "../helpers/conformance.js";
import { pgDatabasePerFile } from "../helpers/pg.js";

/**
 * Event claims with no cluster-wide lock (src/db/pg/event-claims.ts): claims of the same delivery
 * key are serialised by the key's delivery_keys row, taken for one statement, and count the key's
 * leases after it is held; claims of other keys never wait. These are the ways that could break the
 * per-key cap across processes, or make one process's claims wait for another's: bursts of claims
 * of one key by several stores at once, a key's lock held open, and the advisory locks of old.
 */

const HOST = "hooks.example:443";
const file = pgDatabasePerFile();
const store = () => file.store();

/** `count` due events of a new client to HOST, and their key. */
async function keyWith(s: Store, count: number) {
  const { clientId, events } = await eventsOf(s, count, `https://${HOST}/hook`);
  return { events, key: { clientId, host: HOST } };
}

const claim = (
  s: Store,
  key: { clientId: string; host: string },
  token: string,
  limit: number,
  maxPerKey: number,
  now = NOW,
) => s.events.claimOfKey(key, { now, leaseMs: 30_000, token, limit, maxPerKey });

const claimDue = (s: Store, token: string, limit: number, maxPerKey: number) =>
  s.events.claimDue({
    now: NOW,
    leaseMs: 30_000,
    token,
    limit,
    excludeKeys: [],
    keyRoom: () => limit,
    maxPerKey,
  });

/** The key's events leased at `now`, whoever holds them (what the cap is about). */
async function leasedInDb(clientId: string, now = NOW): Promise<number> {
  const r = await file.admin.query(
    "SELECT count(*)::int AS n FROM events WHERE client_id = $1 AND delivery_status = 'pending' AND claimed_until >= $2",
    [clientId, now],
  );
  return (r.rows[0] as { n: number }).n;
}

/** Advisory locks held or waited for in this test's database (other test files run on the same server). */
async function advisoryLocks(): Promise<number> {
  const r = await file.admin.query(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
  );
  return (r.rows[0] as { n: number }).n;
}

/** Whether a session of this test's database waits for a lock (a row lock shows as a wait on its holder's transaction). */
async function lockWaiters(): Promise<boolean> {
  const r = await file.admin.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
  );
  return (r.rows[0] as { n: number }).n > 0;
}

describe("PostgreSQL event claims, serialised per key only", () => {
  it("three stores claiming one key in bursts, refills and due claims at once, never hold more than maxPerKey together", async () => {
    const [a, b, c] = [await store(), await store(), await store()];
    const { key } = await keyWith(a, 60);
    const cap = 4;
    let most = 0;
    let taken = 0;
    for (let round = 0; round < 25; round++) {
      // A burst: every store refills the key twice and claims what is due, all at once.
      const got = (
        await Promise.all(
          [a, b, c].flatMap((s, i) => [
            claim(s, key, `r${round}:${i}:1`, 3, cap),
            claim(s, key, `r${round}:${i}:2`, 3, cap),
            claimDue(s, `r${round}:${i}:3`, 3, cap),
          ]),
        )
      ).flat();
      const leased = await leasedInDb(key.clientId);
      most = Math.max(most, leased);
      expect(leased, `round ${round}`).toBeLessThanOrEqual(cap);
      // Never the same event twice.
      expect(new Set(got.map((e) => e.id)).size).toBe(got.length);
      taken += got.length;
      // Some leases end (one delivered, one handed back), so each round claims into a part-full key.
      const [first, second] = got;
      if (first)
        await a.events.recordAttempt(first.id, first.claimToken!, attemptOf(first, 200), {
          deliveryStatus: "succeeded",
          deliveredAt: NOW,
        });
      if (second) await b.events.release(second.id, second.claimToken!, {});
    }
    expect(most).toBe(cap);
    expect(taken).toBeGreaterThan(cap);
  });

  it("no advisory lock is taken or waited for while several stores claim", async () => {
    const [a, b] = [await store(), await store()];
    const { key } = await keyWith(a, 30);
    let seen = 0;
    let sampling = true;
    const sampler = (async () => {
      let samples = 0;
      while (sampling || samples === 0) {
        seen += await advisoryLocks();
        samples += 1;
      }
      return samples;
    })();
    for (let round = 0; round < 10; round++) {
      const got = (
        await Promise.all([
          claim(a, key, `a${round}`, 2, 8),
          claim(b, key, `b${round}`, 2, 8),
          claimDue(b, `d${round}`, 2, 8),
        ])
      ).flat();
      for (const e of got) await a.events.release(e.id, e.claimToken!, {});
    }
    sampling = false;
    expect(await sampler).toBeGreaterThan(0);
    expect(seen).toBe(0);
  });

  it("a key's lock held open delays claims of that key only: other keys are claimed at once, and claimDue leaves the held key to its holder", async () => {
    const a = await store();
    const held = await keyWith(a, 3);
    const other = await keyWith(a, 2);
    // One claim of each key writes its delivery_keys row; both leases are handed back.
    for (const k of [held, other])
      for (const e of await claim(a, k.key, "a:0", 1, 8)) await a.events.release(e.id, "a:0", {});
    const holder = new pg.Client({ connectionString: file.url });
    await holder.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM delivery_keys WHERE client_id = $1 AND destination_host = $2 FOR UPDATE", [
        held.key.clientId,
        HOST,
      ]);
      expect((await claim(a, other.key, "a:1", 1, 8)).map((e) => e.id)).toEqual([other.events[0]!.id]);
      // (Other tests of this file left events of their own keys due: a limit past all of them.)
      const due = await claimDue(a, "a:2", 500, 8);
      expect(due.map((e) => e.clientId)).not.toContain(held.key.clientId);
      expect(due.map((e) => e.id)).toContain(other.events[1]!.id);
      // The held key's refill waits for the holder, then counts and claims.
      let done = false;
      const waiting = claim(a, held.key, "a:3", 2, 8).then((got) => {
        done = true;
        return got;
      });
      // Seen waiting for a lock on the server, not answered.
      while (!(await lockWaiters())) await new Promise((r) => setTimeout(r, 10));
      expect(done).toBe(false);
      await holder.query("COMMIT");
      expect((await waiting).map((e) => e.id)).toEqual(held.events.slice(0, 2).map((e) => e.id));
    } finally {
      await holder.end();
    }
  });

  it("a claim that waited for its key counts the leases the holder committed meanwhile (READ COMMITTED: the count starts after the lock)", async () => {
    const a = await store();
    const { events, key } = await keyWith(a, 8);
    for (const e of await claim(a, key, "a:0", 1, 8)) await a.events.release(e.id, "a:0", {});
    const holder = new pg.Client({ connectionString: file.url });
    await holder.connect();
    try {
      // Another instance's claim, as it would run: the key's lock, then three leases.
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM delivery_keys WHERE client_id = $1 AND destination_host = $2 FOR UPDATE", [
        key.clientId,
        HOST,
      ]);
      await holder.query("UPDATE events SET claimed_until = $1, claim_token = 'other:1' WHERE id = ANY($2::text[])", [
        NOW + 30_000,
        events.slice(0, 3).map((e) => e.id),
      ]);
      const waiting = claim(a, key, "a:1", 5, 4);
      while (!(await lockWaiters())) await new Promise((r) => setTimeout(r, 10));
      await holder.query("COMMIT");
      // A count in the statement that waited for the lock would see none of the three, and take four.
      expect((await waiting).map((e) => e.id)).toEqual([events[3]!.id]);
      expect(await leasedInDb(key.clientId)).toBe(4);
    } finally {
      await holder.end();
    }
  });

  it("a store's leases count for another store's claims of the key, and end when recorded", async () => {
    const [a, b] = [await store(), await store()];
    const { key } = await keyWith(a, 8);
    expect(await claim(a, key, "a:1", 2, 3)).toHaveLength(2);
    const fromB = await claim(b, key, "b:1", 5, 3);
    expect(fromB).toHaveLength(1);
    expect(await claim(a, key, "a:2", 5, 3)).toEqual([]);
    await b.events.recordAttempt(fromB[0]!.id, "b:1", attemptOf(fromB[0]!, 200), {
      deliveryStatus: "succeeded",
      deliveredAt: NOW,
    });
    expect(await claim(a, key, "a:3", 5, 3)).toHaveLength(1);
    expect(await leasedInDb(key.clientId)).toBe(3);
  });

  it("a store alone refills a key at its cap as its own leases end: an attempt recorded, a lease handed back, a redelivery", async () => {
    const a = await store();
    const { key } = await keyWith(a, 5);
    const [first, second] = await claim(a, key, "a:1", 5, 2);
    await a.events.recordAttempt(first!.id, "a:1", attemptOf(first!, 200), {
      deliveryStatus: "succeeded",
      deliveredAt: NOW,
    });
    await a.events.release(second!.id, "a:1", {});
    const next = await claim(a, key, "a:2", 5, 2);
    expect(next).toHaveLength(2);
    expect(await claim(a, key, "a:3", 5, 2)).toEqual([]);
    // A new round takes a lease away (redeliver): the slot is free again.
    await redeliverLast(a, next[0]!.taskId, NOW);
    expect(await claim(a, key, "a:4", 5, 2)).toHaveLength(1);
    expect(await leasedInDb(key.clientId)).toBe(2);
  });

  it("two stores claiming, recording and handing back one key's events at once never hold more than maxPerKey together", async () => {
    const [a, b] = [await store(), await store()];
    const { events, key } = await keyWith(a, 40);
    const cap = 3;
    let most = 0;
    let delivered = 0;
    const work = async (s: Store, name: string) => {
      for (let round = 0; delivered < events.length && round < 400; round++) {
        const got = await claim(s, key, `${name}:${round}`, 2, cap);
        most = Math.max(most, await leasedInDb(key.clientId));
        // Every other event goes back once before it is delivered: leases end both ways.
        for (const e of got) {
          if (e.attempts === 0 && round % 2 === 0) await s.events.release(e.id, e.claimToken!, { attempts: 1 });
          else {
            await s.events.recordAttempt(e.id, e.claimToken!, attemptOf(e, 200), {
              deliveryStatus: "succeeded",
              deliveredAt: NOW,
            });
            delivered += 1;
          }
        }
      }
    };
    await Promise.all([work(a, "a"), work(b, "b")]);
    expect(delivered).toBe(events.length);
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(cap);
  });

  it("attempts settling in one turn are written by one statement; an event recorded twice in it keeps the first record's state, as in order", async () => {
    const a = await store();
    const { events, key } = await keyWith(a, 3);
    const [e1, e2, e3] = await claim(a, key, "a:1", 3, 3);
    const ok = { deliveryStatus: "succeeded" as const, deliveredAt: NOW };
    // One turn: e1 twice (the second finds its lease gone and changes nothing), e2 and e3 once.
    await Promise.all([
      a.events.recordAttempt(e1!.id, "a:1", attemptOf(e1!, 200), ok),
      a.events.recordAttempt(e2!.id, "a:1", attemptOf(e2!, 500), { attempts: 1, nextAttemptAt: NOW + 60_000 }),
      a.events.recordAttempt(e1!.id, "a:1", attemptOf(e1!, 500), { attempts: 9, nextAttemptAt: NOW + 60_000 }),
      a.events.recordAttempt(e3!.id, "a:1", attemptOf(e3!, 200), ok),
    ]);
    const after = await Promise.all(events.map((e) => a.events.find(e.id)));
    expect(after.map((e) => [e!.id, e!.deliveryStatus, e!.attempts, e!.claimToken])).toEqual(
      [e1, e2, e3].map((e, i) => [e!.id, i === 1 ? "pending" : "succeeded", i === 1 ? 1 : 0, null]),
    );
    expect((await a.events.attemptsOfTask(e1!.taskId)).map((x) => x.statusCode).sort()).toEqual([200, 500]);
  });
});

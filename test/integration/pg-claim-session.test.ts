import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { redeliverLast } from "../../src/core/delivery.js";
import { EVENT_CLAIM_LOCK } from "../../src/db/pg/mapping.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { pgStore } from "../../src/open-store.js";
import type { EventRow, Store } from "../../src/store/store.js";
import { attemptOf, eventsOf, NOW } from "../helpers/conformance.js";
import { freshPgDatabase } from "../helpers/pg.js";

/**
 * The claims' lock kept between claims (src/db/pg/claim-session.ts): a store that holds it claims a
 * key without counting its leases while no other session's lease of the key is known. These are
 * the ways that could break the per-key cap across processes, or starve another process's claims:
 * hand-over to a waiting store, other stores' leases counted after a hand-over, a claims
 * connection lost while its leases live on, and two stores claiming, recording and releasing at once.
 */

const HOST = "hooks.example:443";
let db: { url: string; drop: () => Promise<void> };
let admin: pg.Client;
const stores: PgStore[] = [];

beforeAll(async () => {
  db = await freshPgDatabase();
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
});
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});
afterAll(async () => {
  await admin.end();
  await db.drop();
});

async function store(): Promise<PgStore> {
  const s = await pgStore(db.url, { migrate: false, max: 4 });
  stores.push(s);
  return s;
}

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

/** The claims' lock of this test's database (other test files run claims on the same server). */
const CLAIMS_LOCK =
  "locktype = 'advisory' AND classid = $1 AND objid = 1 AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/** Sessions waiting for the claims' lock. */
async function waitersForClaims(): Promise<number> {
  const r = await admin.query(`SELECT count(*)::int AS n FROM pg_locks WHERE ${CLAIMS_LOCK} AND NOT granted`, [
    EVENT_CLAIM_LOCK,
  ]);
  return (r.rows[0] as { n: number }).n;
}

/** The key's events leased at `now`, whoever holds them (what the cap is about). */
async function leasedInDb(clientId: string, now = NOW): Promise<number> {
  const r = await admin.query(
    "SELECT count(*)::int AS n FROM events WHERE client_id = $1 AND delivery_status = 'pending' AND claimed_until >= $2",
    [clientId, now],
  );
  return (r.rows[0] as { n: number }).n;
}

describe("PostgreSQL claims under the lock kept between claims", () => {
  it("a second store gets the lock and counts the first one's leases; the first then counts the second's, and sees them end", async () => {
    const [a, b] = [await store(), await store()];
    const { key } = await keyWith(a, 8);
    expect(await claim(a, key, "a:1", 2, 3)).toHaveLength(2);
    // a keeps the lock for a moment after its claim; b waits for it, then counts a's two leases.
    const fromB = await claim(b, key, "b:1", 5, 3);
    expect(fromB).toHaveLength(1);
    // a takes the lock back: b's lease is counted, the key is full.
    expect(await claim(a, key, "a:2", 5, 3)).toEqual([]);
    await b.events.recordAttempt(fromB[0]!.id, "b:1", attemptOf(fromB[0]!, 200), {
      deliveryStatus: "succeeded",
      deliveredAt: NOW,
    });
    // b's lease ended: a, which found one of b's leases in this tenure, counts again and takes the slot.
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

  it("while one store keeps claiming, another store's claim is served at its next claim, not after it stops", async () => {
    const [a, b] = [await store(), await store()];
    const { key } = await keyWith(a, 4);
    const other = await keyWith(a, 1);
    let claimsByA = 0;
    let bWaitingAt: number | null = null;
    let bServedAt: number | null = null;
    await claim(a, key, "a:0", 1, 8).then((got) => a.events.release(got[0]!.id, "a:0", {}));
    const fromB = claim(b, other.key, "b:1", 1, 8).then((got) => {
      bServedAt = claimsByA;
      return got;
    });
    // a claims and hands its event back, again and again, holding the lock unless it sees b waiting.
    for (; claimsByA < 200 && bServedAt === null; claimsByA++) {
      if (bWaitingAt === null && (await waitersForClaims()) > 0) bWaitingAt = claimsByA;
      const got = await claim(a, key, `a:${claimsByA + 1}`, 1, 8);
      for (const e of got) await a.events.release(e.id, e.claimToken!, {});
    }
    expect((await fromB).map((e: EventRow) => e.id)).toEqual([other.events[0]!.id]);
    // Served a few of a's claims after a's first look found b waiting (b's answer comes after it
    // hands the lock back, which a may already use), or before a looked; never at the loop's end.
    expect(bServedAt).not.toBeNull();
    expect(bServedAt! - (bWaitingAt ?? bServedAt!)).toBeLessThanOrEqual(10);
  });

  it("a store whose claims connection dies loses the lock: its leases still count for the others, and it counts again", async () => {
    const [a, b] = [await store(), await store()];
    const { key } = await keyWith(a, 6);
    expect(await claim(a, key, "a:1", 2, 3)).toHaveLength(2);
    // a holds the lock for a moment after its claim (unless it let it go already): its session is ended.
    const holders = await admin.query(`SELECT pid FROM pg_locks WHERE ${CLAIMS_LOCK} AND granted`, [EVENT_CLAIM_LOCK]);
    for (const h of holders.rows as Array<{ pid: number }>)
      await admin.query("SELECT pg_terminate_backend($1)", [h.pid]);
    // b gets the one slot left, at its first claim or (once in ~30 runs, cause not found: the killed
    // backend's lock or leases may still be visible for a moment) its second; never more than one.
    const first = await claim(b, key, "b:1", 5, 3);
    const got = first.length > 0 ? first : await claim(b, key, "b:2", 5, 3);
    expect(got).toHaveLength(1);
    // a's first claim may meet its dead connection; the next one runs on a new one, under the lock, and counts.
    const again = await claim(a, key, "a:2", 5, 3).catch(() => claim(a, key, "a:3", 5, 3));
    expect(again).toEqual([]);
    expect(await leasedInDb(key.clientId)).toBe(3);
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

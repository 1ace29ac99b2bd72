import { describe, expect, it } from "vitest";
import { claimDue, leasedOfKey, leasedOfKeyQuery } from "../../src/db/sqlite/event-claims.js";
import { nextDueAt } from "../../src/db/sqlite/events.js";
import { deliveryKey } from "../../src/store/delivery-key.js";
import { eventsOf, NOW } from "../helpers/conformance.js";
import { memoryStore } from "../helpers/memory-store.js";

/**
 * The per-key cap's count on SQLite (src/db/sqlite/event-claims.ts leasedOfKey): it reads the
 * partial index over leased events only, so it costs what is in flight for the key, not the key's
 * backlog (it used to walk every pending event of the key: 0.73 ms at 5,000, at every refill).
 */
describe("SQLite: a key's leased events are counted from its leases alone", () => {
  it("the count's plan searches events_key_leased_idx, and the count is right with a backlog and expired leases", async () => {
    const store = memoryStore();
    try {
      const { clientId, events } = await eventsOf(store, 12, "https://hooks.example/x");
      const key = { clientId, host: "hooks.example:443" };
      const db = store.database.db;
      const { sql, params } = leasedOfKeyQuery(db).toSQL();
      const plan = store.database.sqlite
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all(...params.map(() => null))
        .map((r) => (r as { detail: string }).detail)
        .join("; ");
      expect(plan).toContain("events_key_leased_idx");
      expect(leasedOfKey(db, key, NOW)).toBe(0);
      await store.events.claimOfKey(key, { now: NOW, leaseMs: 30_000, token: "a:1", limit: 3, maxPerKey: 5 });
      await store.events.claimOfKey(key, { now: NOW, leaseMs: 1_000, token: "a:2", limit: 1, maxPerKey: 5 });
      expect(leasedOfKey(db, key, NOW)).toBe(4);
      // The short lease has expired 2 s later; a handed-back one counts no more.
      await store.events.release(events[0]!.id, "a:1", {});
      expect(leasedOfKey(db, key, NOW + 2_000)).toBe(2);
    } finally {
      await store.close();
    }
  });
});

/**
 * The loop's claim on SQLite (src/db/sqlite/event-claims.ts claimDue): a key at its cap is left
 * out, and its backlog, due before everyone else's, is not walked at every claim. The first `scan`
 * due events are looked at; past them, each other key's own first events (events_key_due_idx).
 */
describe("SQLite: the loop's claim does not walk a capped key's backlog", () => {
  /** `n` more pending events due at NOW of the key of `like` (copies of it, of its task). */
  const backlog = (store: ReturnType<typeof memoryStore>, like: string, n: number) =>
    store.database.sqlite
      .prepare(
        `WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?)
         INSERT INTO events (id, client_id, task_id, type, sequence, payload, callback_url, delivery_status,
                             next_attempt_at, created_at, destination_host, webhook_id)
         SELECT id || '-' || n, client_id, task_id, type, sequence, payload, callback_url, 'pending',
                next_attempt_at, created_at, destination_host, webhook_id || '-' || n FROM events, i WHERE id = ?`,
      )
      .run(n, like);
  const loopClaim = (store: ReturnType<typeof memoryStore>, capped: string, extra: { scan?: number; now?: number }) =>
    claimDue(store.database.db, {
      now: extra.now ?? NOW,
      leaseMs: 30_000,
      token: "loop:1",
      limit: 4,
      excludeKeys: [capped],
      keyRoom: () => 4,
      maxPerKey: 4,
      ...(extra.scan !== undefined ? { scan: extra.scan } : {}),
    });

  it("another key's events due after the capped key's backlog are claimed, past the scan", async () => {
    const store = memoryStore();
    try {
      const capped = await eventsOf(store, 1, "https://capped.example/x");
      backlog(store, capped.events[0]!.id, 40);
      const other = await eventsOf(store, 3, "https://other.example/x");
      const got = loopClaim(store, deliveryKey(capped.clientId, "capped.example:443"), { scan: 8, now: NOW + 1 });
      expect(got.map((e) => e.id)).toEqual(other.events.map((e) => e.id));
      // Nothing else is due beside the capped key: none is claimed, with or without the scan.
      expect(loopClaim(store, deliveryKey(capped.clientId, "capped.example:443"), { scan: 8, now: NOW + 1 })).toEqual(
        [],
      );
    } finally {
      await store.close();
    }
  });

  it("past the scan, key by key, it picks what the whole walk picks: several hosts of a client, other clients", async () => {
    const store = memoryStore();
    try {
      const capped = await eventsOf(store, 1, "https://capped.example/x");
      backlog(store, capped.events[0]!.id, 30);
      const cappedKey = deliveryKey(capped.clientId, "capped.example:443");
      // The capped key's client has two more hosts; two more clients one host each, interleaved in due order.
      for (const [i, host] of ["a", "b", "c", "d"].entries())
        await eventsOf(store, 1 + i, `https://${host}.example/x`, i < 2 ? capped.clientId : undefined);
      const sqlite = store.database.sqlite;
      const ids = (scan: number) => {
        sqlite.exec("SAVEPOINT probe");
        try {
          return loopClaim(store, cappedKey, { scan, now: NOW + 1 }).map((e) => e.id);
        } finally {
          sqlite.exec("ROLLBACK TO probe; RELEASE probe");
        }
      };
      const whole = ids(10_000);
      expect(whole.length).toBe(4);
      for (const scan of [1, 4, 8, 31]) expect(ids(scan)).toEqual(whole);
    } finally {
      await store.close();
    }
  });

  it("the loop's next due time past the capped key's backlog is the other keys' first, exactly", async () => {
    const store = memoryStore();
    try {
      const capped = await eventsOf(store, 1, "https://capped.example/x");
      backlog(store, capped.events[0]!.id, 40);
      const excludeKeys = [deliveryKey(capped.clientId, "capped.example:443")];
      const db = store.database.db;
      // Nothing else pending: none, not "look again in a second".
      expect(nextDueAt(db, { now: NOW, excludeKeys, scan: 8 })).toBeNull();
      const other = await eventsOf(store, 2, "https://other.example/x");
      const later = store.database.sqlite.prepare("UPDATE events SET next_attempt_at = ? WHERE id = ?");
      later.run(NOW + 7_000, other.events[0]!.id);
      later.run(NOW + 5_000, other.events[1]!.id);
      expect(nextDueAt(db, { now: NOW, excludeKeys, scan: 8 })).toBe(NOW + 5_000);
      // Its client left out too: none again.
      expect(nextDueAt(db, { now: NOW, excludeKeys, excludeClients: [other.clientId], scan: 8 })).toBeNull();
    } finally {
      await store.close();
    }
  });

  it("a claim's cost does not grow with the capped key's backlog", async () => {
    const costOf = async (n: number) => {
      const store = memoryStore();
      try {
        const capped = await eventsOf(store, 1, "https://capped.example/x");
        backlog(store, capped.events[0]!.id, n);
        const key = deliveryKey(capped.clientId, "capped.example:443");
        loopClaim(store, key, {});
        const times: number[] = [];
        for (let i = 0; i < 7; i++) {
          const t0 = process.hrtime.bigint();
          loopClaim(store, key, {});
          times.push(Number(process.hrtime.bigint() - t0));
        }
        return times.sort((a, b) => a - b)[3]!;
      } finally {
        await store.close();
      }
    };
    const small = await costOf(100);
    const large = await costOf(20_000);
    // Walking the backlog made the large one about 50–100 times the small one's.
    expect(large / small).toBeLessThan(10);
  });
});

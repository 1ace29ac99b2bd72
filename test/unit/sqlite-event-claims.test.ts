import { describe, expect, it } from "vitest";
import { leasedOfKey, leasedOfKeyQuery } from "../../src/db/sqlite/event-claims.js";
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

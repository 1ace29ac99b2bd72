import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FairPool } from "../../src/core/fair-pool.js";
import { EVENT_SCAN_FACTOR } from "../../src/db/kit/claim-window.js";
import { deliveryKey } from "../../src/store/delivery-key.js";
import type { EventRow } from "../../src/store/rows.js";
import { claimEvents, client, conformance, NOW, ownKeyEvents } from "../helpers/conformance.js";

/**
 * EventStore.claimDue as the dispatcher's loop calls it (checklist: store-conformance.md): one
 * statement's worth of due events across keys and clients, sized by a real FairPool, on both
 * drivers. For random backlogs and pool states, the batched claim keeps every key within its room
 * and the shared cap, no client at its share given more, the pool within its size, and takes clients
 * in turns: no client gets a second event while another below its share with due events got none.
 */
const suite = conformance();

const countBy = (rows: EventRow[], of: (e: EventRow) => string) => {
  const n = new Map<string, number>();
  for (const e of rows) n.set(of(e), (n.get(of(e)) ?? 0) + 1);
  return n;
};

describe.each(suite.dialects)("EventStore.claimDue, batched across keys, on %s", (_name, h) => {
  it("property: per-key caps, client rooms and turns between clients hold for random backlogs and pool states", async () => {
    const { store } = await h.fresh();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 16 }),
        fc.integer({ min: 1, max: 4 }),
        // Due events per key: 3 clients, 2 hosts each.
        fc.array(fc.nat(5), { minLength: 6, maxLength: 6 }),
        // The pool's state: slots already taken (attempts in flight), by client and host.
        fc.array(fc.record({ client: fc.nat(2), host: fc.nat(1) }), { maxLength: 20 }),
        async (size, maxPerKey, backlog, taken) => {
          run += 1;
          const clients = await Promise.all([0, 1, 2].map(() => client(store)));
          const keys: Array<{ clientId: string; key: string; due: EventRow[] }> = [];
          for (const [i, n] of backlog.entries()) {
            const clientId = clients[Math.floor(i / 2)]!.id;
            const made = await ownKeyEvents(store, n, clientId);
            keys.push({ clientId, key: deliveryKey(clientId, made.key.host), due: made.events });
          }
          try {
            const pool = new FairPool({ size, maxPerKey, now: () => NOW });
            for (const t of taken) pool.tryAcquire(clients[t.client]!.id, keys[t.client * 2 + t.host]!.key);
            const limit = pool.claimable;
            const keyRoomBefore = new Map(keys.map((k) => [k.key, pool.keyRoom(k.key)]));
            const atShare = pool.busyClients();

            const got =
              limit > 0
                ? await store.events.claimDue({
                    now: NOW,
                    leaseMs: 30_000,
                    token: `fair:${run}`,
                    limit,
                    excludeKeys: keys.filter((k) => pool.keyRoom(k.key) <= 0).map((k) => k.key),
                    excludeClients: atShare,
                    keyRoom: (key) => pool.keyRoom(key),
                    clientRoom: (clientId, picked) => pool.room(clientId, picked),
                    maxPerKey,
                  })
                : [];

            expect(new Set(got.map((e) => e.id)).size).toBe(got.length);
            expect(got.length).toBeLessThanOrEqual(Math.max(0, limit));
            const byKey = countBy(got, (e) => deliveryKey(e.clientId, e.destinationHost));
            for (const k of keys)
              expect(byKey.get(k.key) ?? 0).toBeLessThanOrEqual(Math.max(0, keyRoomBefore.get(k.key)!));
            // A client at its share gets nothing (its room may grow within the claim only through the
            // reserve, which serves clients below their share: the pool's own rule, checked below by size).
            const byClient = countBy(got, (e) => e.clientId);
            for (const id of atShare) expect(byClient.get(id) ?? 0).toBe(0);
            // Turns: with every due event within the claim's window, a client below its share with a key
            // that has room and due events gets one before any client gets a second, unless the others'
            // picks brought it to its share (the pool's room with the claim's picks counted).
            const due = keys.reduce((n, k) => n + k.due.length, 0);
            if (got.length > 0 && due <= limit * EVENT_SCAN_FACTOR) {
              const most = Math.max(...byClient.values());
              for (const c of clients) {
                const eligible =
                  !atShare.includes(c.id) &&
                  keys.some((k) => k.clientId === c.id && k.due.length > 0 && keyRoomBefore.get(k.key)! > 0);
                if (eligible && most >= 2 && !byClient.has(c.id))
                  expect(pool.room(c.id, byClient)).toBeLessThanOrEqual(0);
              }
            }
            // Started as the dispatcher starts them: the pool never passes its size nor a key its cap.
            for (const e of got) pool.take(e.clientId, deliveryKey(e.clientId, e.destinationHost));
            expect(pool.inUse).toBeLessThanOrEqual(size);
            for (const k of keys) expect(pool.inFlightTo(k.key)).toBeLessThanOrEqual(maxPerKey);
          } finally {
            // What is left is leased away, so the next run's claim (a shrunk one too) sees only its own backlog.
            await claimEvents(store, `sweep:${run}`, { limit: 1_000 });
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});

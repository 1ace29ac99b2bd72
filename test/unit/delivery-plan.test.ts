import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FairPool } from "../../src/core/fair-pool.js";
import {
  busyKeys,
  excludedKeys,
  firstCoolDownMs,
  keyRoom,
  nextSaturationBackoff,
  noteSaturation,
  pausedTrialUntil,
  quietAfterRefill,
  refillClaims,
  refillOutcomes,
  refillPlan,
  refillRoom,
  SATURATED_BACKOFF_MAX_MS,
  SATURATED_BACKOFF_MS,
  saturatedNow,
  type SaturationNote,
  wakeAt,
} from "../../src/core/delivery-plan.js";

const NOW = 1_000_000;
const rooms = (r: Record<string, number>) => (key: string) => r[key] ?? 0;

describe("a key's room", () => {
  it("is the smaller of the pool's room for it and its breaker's allowance", () => {
    expect(keyRoom(3, 8)).toBe(3);
    expect(keyRoom(3, 1)).toBe(1);
    expect(keyRoom(2, 0)).toBe(0);
  });
});

describe("which keys a claim leaves out", () => {
  it("busy: the pool's keys with no room (at their cap, or with a trial out)", () => {
    expect(busyKeys(["a", "b", "c"], rooms({ a: 0, b: 2, c: -1 }))).toEqual(["a", "c"]);
    expect(busyKeys([], rooms({}))).toEqual([]);
  });

  it("excluded: the busy ones, plus keys saturated elsewhere until their back-off ends, if they have room here", () => {
    const saturated = new Map<string, SaturationNote>([
      ["live", { until: NOW + 1, backoffMs: 100 }],
      ["over", { until: NOW, backoffMs: 100 }],
      ["full-here", { until: NOW + 50, backoffMs: 100 }],
    ]);
    const room = rooms({ a: 0, live: 1, over: 1, "full-here": 0 });
    expect(excludedKeys(["a"], saturated, NOW, room)).toEqual(["a", "live"]);
  });
});

describe("saturation across instances", () => {
  it("a note counts until its end, not at it", () => {
    expect(saturatedNow(undefined, NOW)).toBe(false);
    expect(saturatedNow({ until: NOW + 1, backoffMs: 100 }, NOW)).toBe(true);
    expect(saturatedNow({ until: NOW, backoffMs: 100 }, NOW)).toBe(false);
  });

  it("the back-off starts at 100 ms and doubles up to 1 s", () => {
    expect(nextSaturationBackoff(undefined)).toBe(SATURATED_BACKOFF_MS);
    expect(nextSaturationBackoff({ until: 0, backoffMs: 200 })).toBe(400);
    expect(nextSaturationBackoff({ until: 0, backoffMs: 800 })).toBe(SATURATED_BACKOFF_MAX_MS);
    expect(nextSaturationBackoff({ until: 0, backoffMs: SATURATED_BACKOFF_MAX_MS })).toBe(1_000);
  });

  const before = new Map<string, SaturationNote>([
    ["got", { until: NOW + 500, backoffMs: 400 }],
    ["asked-again", { until: NOW - 1, backoffMs: 200 }],
    ["still-on", { until: NOW + 10, backoffMs: 100 }],
    ["ended", { until: NOW, backoffMs: 100 }],
  ]);

  it("a claim that took all it could keeps the notes it did not settle and adds none", () => {
    const next = noteSaturation(before, {
      asked: new Set(["asked-again", "new"]),
      got: new Set(["got"]),
      full: true,
      now: NOW,
      hasRoom: () => true,
    });
    expect([...next]).toEqual([
      ["asked-again", { until: NOW - 1, backoffMs: 200 }],
      ["still-on", { until: NOW + 10, backoffMs: 100 }],
    ]);
  });

  it("a claim that took less: asked keys with room that got nothing are noted (doubling), the others not", () => {
    const next = noteSaturation(before, {
      asked: new Set(["asked-again", "new", "got", "no-room"]),
      got: new Set(["got"]),
      full: false,
      now: NOW,
      hasRoom: (key) => key !== "no-room",
    });
    expect(Object.fromEntries(next)).toEqual({
      "asked-again": { until: NOW + 400, backoffMs: 400 },
      "still-on": { until: NOW + 10, backoffMs: 100 },
      new: { until: NOW + 100, backoffMs: 100 },
    });
    // The notes given are never changed in place.
    expect(before.get("asked-again")).toEqual({ until: NOW - 1, backoffMs: 200 });
  });
});

describe("when the loop wakes after a claim that took less than it could", () => {
  const base = { now: NOW, trialDueWithRoom: false, nextTrialAt: null, due: null, saturatedUntil: [] };

  it("now, when a paused key's trial is due and has room", () => {
    expect(wakeAt({ ...base, trialDueWithRoom: true, nextTrialAt: NOW - 5, due: NOW + 9 })).toBe(NOW);
  });

  it("else the earliest of the next trial, the next due event and the end of a saturation back-off", () => {
    expect(wakeAt({ ...base, nextTrialAt: NOW + 30, due: NOW + 20 })).toBe(NOW + 20);
    expect(wakeAt({ ...base, nextTrialAt: NOW + 10, due: NOW + 20 })).toBe(NOW + 10);
    expect(wakeAt({ ...base, due: NOW + 20, saturatedUntil: [NOW + 15, NOW + 40] })).toBe(NOW + 15);
    expect(wakeAt({ ...base, saturatedUntil: [NOW + 40] })).toBe(NOW + 40);
    expect(wakeAt({ ...base, nextTrialAt: NOW + 7 })).toBe(NOW + 7);
  });

  it("never on a timer when nothing is scheduled", () => {
    expect(wakeAt(base)).toBeNull();
  });
});

describe("a settled attempt's refill", () => {
  it("claims for the key's room and its held slots, within its client's room and the pool's", () => {
    expect(refillRoom({ keyRoom: 0, held: 1, clientRoom: 5, free: 9 })).toEqual({ full: false, room: 1 });
    expect(refillRoom({ keyRoom: 3, held: 1, clientRoom: 2, free: 9 })).toEqual({ full: false, room: 2 });
    expect(refillRoom({ keyRoom: 3, held: 1, clientRoom: 9, free: 1 })).toEqual({ full: false, room: 1 });
    expect(refillRoom({ keyRoom: 3, held: 0, clientRoom: 0, free: 9 })).toEqual({ full: false, room: 0 });
  });

  it("is full when another settle's refill already used the held slot", () => {
    expect(refillRoom({ keyRoom: 0, held: 0, clientRoom: 5, free: 9 })).toEqual({ full: true });
  });
});

describe("a batched refill's plan (one claim for every key settled in a turn)", () => {
  it("gives each key refillRoom in turn, its client's room asked with what the keys before it got, the free slots shared out", () => {
    const asked: Array<[string, number]> = [];
    const plan = refillPlan(
      [
        { key: "a|h1", clientId: "a", keyRoom: 2, held: 1 },
        { key: "a|h2", clientId: "a", keyRoom: 3, held: 0 },
        { key: "b|h1", clientId: "b", keyRoom: 0, held: 0 },
        { key: "c|h1", clientId: "c", keyRoom: 4, held: 1 },
      ],
      (clientId, picked) => {
        asked.push([clientId, picked.get(clientId) ?? 0]);
        return clientId === "a" ? 4 - (picked.get("a") ?? 0) : 9;
      },
      6,
    );
    expect(plan).toEqual([
      { key: "a|h1", full: false, room: 3 },
      { key: "a|h2", full: false, room: 1 },
      { key: "b|h1", full: true },
      { key: "c|h1", full: false, room: 2 },
    ]);
    expect(asked).toEqual([
      ["a", 0],
      ["a", 3],
      ["b", 0],
      ["c", 0],
    ]);
  });

  it("property: with a real FairPool, taking every planned slot keeps each key within its cap, each client within its room and the pool within its size", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 32 }),
        fc.integer({ min: 1, max: 8 }),
        fc.array(fc.record({ client: fc.nat(3), host: fc.nat(2), hold: fc.boolean() }), { maxLength: 40 }),
        fc.array(fc.record({ client: fc.nat(3), host: fc.nat(2) }), { minLength: 1, maxLength: 8 }),
        (size, maxPerKey, taken, asks) => {
          const pool = new FairPool({ size, maxPerKey, now: () => NOW });
          for (const t of taken) {
            const slot = pool.tryAcquire(`c${t.client}`, `c${t.client}|h${t.host}`);
            if (slot && t.hold) slot.release({ holdKey: true });
          }
          const keys = [...new Map(asks.map((a) => [`c${a.client}|h${a.host}`, `c${a.client}`])).entries()];
          // A client's room is what the pool answered when the plan asked (asking is stateful: it puts
          // the client in line, behind clients already asked), plus what the plan had given it by then.
          const roomAsked = new Map<string, number>();
          const plan = refillPlan(
            keys.map(([key, clientId]) => ({ key, clientId, keyRoom: pool.keyRoom(key), held: pool.heldFor(key) })),
            (clientId, picked) => {
              const room = pool.room(clientId, picked);
              roomAsked.set(clientId, (picked.get(clientId) ?? 0) + room);
              return room;
            },
            pool.free,
          );
          const byClient = new Map<string, number>();
          plan.forEach((p, i) => {
            const [key, clientId] = keys[i]!;
            if (p.full) {
              expect(pool.keyRoom(key) + pool.heldFor(key)).toBeLessThanOrEqual(0);
              return;
            }
            expect(p.room).toBeLessThanOrEqual(pool.keyRoom(key) + pool.heldFor(key));
            byClient.set(clientId, (byClient.get(clientId) ?? 0) + p.room);
          });
          for (const [clientId, n] of byClient) expect(n).toBeLessThanOrEqual(roomAsked.get(clientId)!);
          // Taking them (the held slots handed back first, as the dispatcher does) never passes a cap.
          for (const [key] of keys) pool.releaseHold(key, pool.heldFor(key));
          plan.forEach((p, i) => {
            const [key, clientId] = keys[i]!;
            if (!p.full) for (let n = 0; n < p.room; n++) pool.take(clientId, key);
            expect(pool.inFlightTo(key)).toBeLessThanOrEqual(maxPerKey);
          });
          expect(pool.inUse).toBeLessThanOrEqual(size);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("what a batched refill claims and what it came to", () => {
  it("claims for keys given room; a key already filled is full again, one given no room is not", () => {
    const { claims, settled } = refillClaims([
      { key: "a|h1", full: false, room: 3 },
      { key: "b|h1", full: true },
      { key: "c|h1", full: false, room: 0 },
      { key: "d|h1", full: false, room: 1 },
    ]);
    expect(claims).toEqual([
      { key: "a|h1", limit: 3, index: 0 },
      { key: "d|h1", limit: 1, index: 3 },
    ]);
    expect([...settled]).toEqual([
      ["b|h1", { started: 0, full: true }],
      ["c|h1", { started: 0, full: false }],
    ]);
  });

  it("a claimed key is full when it got its whole limit; started counts what started; a key that got nothing is neither", () => {
    const got = new Map([
      ["a|h1", { claimed: 3, started: 2 }],
      ["d|h1", { claimed: 1, started: 1 }],
    ]);
    const out = refillOutcomes(
      [
        { key: "a|h1", limit: 3 },
        { key: "d|h1", limit: 2 },
        { key: "e|h1", limit: 1 },
      ],
      got,
    );
    expect([...out]).toEqual([
      ["a|h1", { started: 2, full: true }],
      ["d|h1", { started: 1, full: false }],
      ["e|h1", { started: 0, full: false }],
    ]);
  });

  it("a settle is quiet when its refill started something, is full again, or its key is saturated elsewhere; not when the refill failed", () => {
    const note = { until: NOW + 100, backoffMs: 100 };
    expect(quietAfterRefill({ started: 1, full: false }, undefined, NOW)).toBe(true);
    expect(quietAfterRefill({ started: 0, full: true }, undefined, NOW)).toBe(true);
    expect(quietAfterRefill({ started: 0, full: false }, note, NOW)).toBe(true);
    expect(quietAfterRefill({ started: 0, full: false }, note, NOW + 100)).toBe(false);
    expect(quietAfterRefill({ started: 0, full: false }, undefined, NOW)).toBe(false);
    expect(quietAfterRefill(undefined, note, NOW)).toBe(false);
  });
});

describe("circuit pauses", () => {
  it("the first pause lasts the first retry's delay plus its jitter, within 1 s and 30 s", () => {
    expect(firstCoolDownMs([0, 10_000])).toBe(12_000);
    expect(firstCoolDownMs([0, 100])).toBe(1_000);
    expect(firstCoolDownMs([0, 60_000])).toBe(30_000);
    expect(firstCoolDownMs([0])).toBe(30_000);
  });

  it("a trial that reopened the circuit spends no retry while its event has waited less than its schedule", () => {
    const t = { trial: true, reopenedUntil: NOW + 60_000, waitedMs: 1_000, scheduleSpanMs: 10_000 };
    expect(pausedTrialUntil(t)).toBe(NOW + 60_000);
    expect(pausedTrialUntil({ ...t, waitedMs: 10_000 })).toBeNull();
    expect(pausedTrialUntil({ ...t, trial: false })).toBeNull();
    expect(pausedTrialUntil({ ...t, reopenedUntil: null })).toBeNull();
  });
});

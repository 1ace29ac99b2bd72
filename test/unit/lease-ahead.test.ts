import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AHEAD_START_MARGIN_MS,
  LEASE_AHEAD_MAX,
  leaseAheadLimit,
  leaseAheadWant,
  leaseRoom,
  mayStartAhead,
  refillClaimsAhead,
} from "../../src/core/delivery-plan.js";

describe("leaseRoom: leases ahead of the in-flight cap, exact across instances", () => {
  it("a claimer holding every lease of the key may lease up to `ahead`; with another's leases out, only the cap's rest", () => {
    expect(leaseRoom({ limit: 100, cap: 8, ahead: 64, leased: 0, mine: 0 })).toBe(64);
    expect(leaseRoom({ limit: 100, cap: 8, ahead: 64, leased: 20, mine: 20 })).toBe(44);
    expect(leaseRoom({ limit: 10, cap: 8, ahead: 64, leased: 20, mine: 20 })).toBe(10);
    expect(leaseRoom({ limit: 100, cap: 8, ahead: 64, leased: 5, mine: 2 })).toBe(3);
    expect(leaseRoom({ limit: 100, cap: 8, ahead: 64, leased: 64, mine: 0 })).toBe(0);
    // No lease ahead asked (or below the cap): the cap less every lease, as before.
    expect(leaseRoom({ limit: 100, cap: 8, ahead: 0, leased: 3, mine: 3 })).toBe(5);
    expect(leaseRoom({ limit: 0, cap: 8, ahead: 64, leased: 0, mine: 0 })).toBe(0);
  });

  /** Instances claiming, starting and settling one key's events in any order; each keeps at most `cap` in flight (its pool). */
  const step = fc.record({
    who: fc.nat(2),
    op: fc.constantFrom("claim", "start", "settle"),
    limit: fc.nat(70),
    ahead: fc.integer({ min: 0, max: 64 }),
  });

  const run = (
    cap: number,
    steps: Array<{ who: number; op: string; limit: number; ahead: number }>,
    rule = leaseRoom,
  ) => {
    const waiting = [0, 0, 0];
    const flying = [0, 0, 0];
    for (const s of steps) {
      const i = s.who;
      if (s.op === "claim") {
        const leased = waiting.reduce((a, b) => a + b) + flying.reduce((a, b) => a + b);
        const mine = waiting[i]! + flying[i]!;
        waiting[i]! += rule({ limit: s.limit, cap, ahead: s.ahead, leased, mine });
      } else if (s.op === "start" && waiting[i]! > 0 && flying[i]! < cap) {
        waiting[i]! -= 1;
        flying[i]! += 1;
      } else if (s.op === "settle" && flying[i]! > 0) flying[i]! -= 1;
      const total = flying.reduce((a, b) => a + b);
      if (total > cap) return false;
      // Either one instance holds the key's leases, or all of them together are within the cap.
      const holders = [0, 1, 2].filter((j) => waiting[j]! + flying[j]! > 0).length;
      if (holders > 1 && waiting.reduce((a, b) => a + b) + total > cap) return false;
    }
    return true;
  };

  it("property: three instances, any interleaving of claims, starts and settles: never more than the cap in flight across them", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.array(step, { maxLength: 80 }), (cap, steps) => run(cap, steps)),
      { numRuns: 500 },
    );
  });

  it("the property fails for a rule that leases ahead whoever else holds leases of the key", () => {
    const careless = (k: Parameters<typeof leaseRoom>[0]) =>
      Math.max(0, Math.min(k.limit, Math.max(k.cap, k.ahead) - k.mine));
    expect(() =>
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 8 }), fc.array(step, { maxLength: 80 }), (cap, steps) =>
          run(cap, steps, careless),
        ),
        { numRuns: 500 },
      ),
    ).toThrow(/Property failed/);
  });
});

describe("how far ahead a key leases", () => {
  it("the cap until the key's attempt time is known; then what its slots get through in the wait a lease allows, at half speed, up to the max", () => {
    expect(leaseAheadLimit({ cap: 8, waitMs: 4_000, attemptMs: undefined })).toBe(8);
    expect(leaseAheadLimit({ cap: 8, waitMs: 4_000, attemptMs: 1 })).toBe(LEASE_AHEAD_MAX);
    expect(leaseAheadLimit({ cap: 8, waitMs: 4_000, attemptMs: 1_000 })).toBe(16);
    expect(leaseAheadLimit({ cap: 8, waitMs: 4_000, attemptMs: 60_000 })).toBe(8);
    expect(leaseAheadLimit({ cap: 8, waitMs: 0, attemptMs: 1 })).toBe(8);
  });

  it("a refill leases more only once no more than half the key's limit (at least a cap's worth) waits", () => {
    expect(leaseAheadWant({ cap: 8, limit: 128, inFlight: 8, waiting: 65 })).toBe(0);
    expect(leaseAheadWant({ cap: 8, limit: 128, inFlight: 8, waiting: 64 })).toBe(56);
    expect(leaseAheadWant({ cap: 8, limit: 12, inFlight: 8, waiting: 9 })).toBe(0);
    expect(leaseAheadWant({ cap: 8, limit: 12, inFlight: 2, waiting: 8 })).toBe(2);
    expect(leaseAheadWant({ cap: 8, limit: 8, inFlight: 3, waiting: 0 })).toBe(5);
    expect(leaseAheadWant({ cap: 8, limit: 8, inFlight: 8, waiting: 0 })).toBe(0);
  });

  it("a key whose last refill found fewer than it asked for (its backlog all leased) leases more only once a cap's worth waits", () => {
    expect(leaseAheadWant({ cap: 8, limit: 128, inFlight: 8, waiting: 40, dry: true })).toBe(0);
    expect(leaseAheadWant({ cap: 8, limit: 128, inFlight: 8, waiting: 8, dry: true })).toBe(112);
    expect(leaseAheadWant({ cap: 8, limit: 128, inFlight: 8, waiting: 40, dry: false })).toBe(80);
  });

  it("a leased-ahead event starts only while its lease outlasts an attempt's timeout and the margin", () => {
    expect(mayStartAhead(10_000 + 5_000 + AHEAD_START_MARGIN_MS, 10_000, 5_000)).toBe(true);
    expect(mayStartAhead(10_000 + 5_000 + AHEAD_START_MARGIN_MS - 1, 10_000, 5_000)).toBe(false);
    expect(mayStartAhead(null, 10_000, 5_000)).toBe(false);
  });

  it("refillClaimsAhead: each key's claim takes its lease-ahead too; a key with no room to start is claimed for those alone", () => {
    const plan = [
      { key: "a", full: false as const, room: 2 },
      { key: "b", full: true as const },
      { key: "c", full: false as const, room: 0 },
      { key: "d", full: false as const, room: 0 },
    ];
    const got = refillClaimsAhead(plan, (i) => [10, 20, 0, 5][i]!);
    expect(got.claims).toEqual([
      { key: "a", limit: 12, starts: 2, index: 0 },
      { key: "b", limit: 20, starts: 0, index: 1 },
      { key: "d", limit: 5, starts: 0, index: 3 },
    ]);
    expect([...got.settled]).toEqual([["c", { started: 0, full: false }]]);
  });
});

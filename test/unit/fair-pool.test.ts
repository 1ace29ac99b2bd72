import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FairPool, type Slot } from "../../src/core/fair-pool.js";

/** Takes slots for the client under the key until the pool says no; returns them. */
function grab(pool: FairPool, clientId: string, key = `${clientId}|h`, max = 1_000): Slot[] {
  const slots: Slot[] = [];
  while (slots.length < max) {
    const slot = pool.tryAcquire(clientId, key);
    if (!slot) break;
    slots.push(slot);
  }
  return slots;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("FairPool: share, reserve and per-key caps", () => {
  it("keeps an eighth of the pool back by default; a client alone takes the rest and never the reserve", () => {
    const pool = new FairPool({ size: 64 });
    expect([pool.reserve, pool.reserveLevel]).toEqual([8, 4]);
    expect(grab(pool, "a", "a|1", 8).length + grab(pool, "a", "a|2").length).toBe(56);
    expect(pool.room("a")).toBe(0);
    expect(new FairPool({ size: 4 }).reserve).toBe(1);
    expect(new FairPool({ size: 1 }).reserve).toBe(0);
  });

  it("a client with nothing in flight gets a reserve slot while another holds the rest", () => {
    const pool = new FairPool({ size: 16 });
    grab(pool, "hostile");
    expect(pool.inFlightOf("hostile")).toBe(14);
    expect(pool.tryAcquire("victim", "victim|h")).not.toBeNull();
  });

  it("repro 7: a client whose own attempt is slow still gets a slot from the reserve, up to reserveLevel slots", () => {
    const pool = new FairPool({ size: 64 });
    grab(pool, "hostile");
    expect(pool.inFlightOf("hostile")).toBe(56);
    const slow = pool.tryAcquire("victim", "victim|slow")!;
    expect(slow).not.toBeNull();
    // Before #30 the reserve was only for clients with nothing in flight: this was null.
    expect(pool.tryAcquire("victim", "victim|fast")).not.toBeNull();
    expect(grab(pool, "victim", "victim|fast")).toHaveLength(2);
    expect(pool.inFlightOf("victim")).toBe(pool.reserveLevel);
    // The rest of the reserve is there for a third client.
    expect(grab(pool, "third")).toHaveLength(4);
    slow.release();
    expect(pool.tryAcquire("hostile", "hostile|h")).toBeNull();
  });

  it("a client over its share starts nothing while others hold slots; what it frees goes to the clients below theirs, the reserve to a newcomer", () => {
    const pool = new FairPool({ size: 8 });
    const hostile = grab(pool, "hostile");
    expect(hostile).toHaveLength(7);
    expect(pool.tryAcquire("victim", "victim|h")).not.toBeNull();
    expect(pool.busyClients().sort()).toEqual(["hostile", "victim"]);
    hostile[0]!.release();
    expect(pool.tryAcquire("hostile", "hostile|h")).toBeNull();
    expect(pool.tryAcquire("victim", "victim|h")).not.toBeNull();
    // The victim holds the reserve's level: the next freed slot is kept for a client with less.
    hostile[1]!.release();
    expect(pool.tryAcquire("hostile", "hostile|h")).toBeNull();
    expect(pool.tryAcquire("victim", "victim|h")).toBeNull();
    expect(pool.tryAcquire("newcomer", "newcomer|h")).not.toBeNull();
    // Shares of 2 (7 / 3): the hostile client's next freed slots go to the newcomer, below its share.
    hostile[2]!.release();
    hostile[3]!.release();
    expect(pool.tryAcquire("hostile", "hostile|h")).toBeNull();
    expect(pool.tryAcquire("victim", "victim|h")).toBeNull();
    expect(pool.tryAcquire("newcomer", "newcomer|h")).not.toBeNull();
    expect([pool.inFlightOf("hostile"), pool.inFlightOf("victim"), pool.inFlightOf("newcomer")]).toEqual([3, 2, 2]);
  });

  it("caps each key, and a slot released for its key's refill keeps the key's room until handed back", () => {
    const pool = new FairPool({ size: 16, maxPerKey: 2 });
    const [a, b] = grab(pool, "c", "c|one");
    expect(pool.tryAcquire("c", "c|one")).toBeNull();
    expect(pool.tryAcquire("c", "c|two")).not.toBeNull();
    a!.release({ holdKey: true });
    expect(pool.keyRoom("c|one")).toBe(0);
    expect(pool.keys().sort()).toEqual(["c|one", "c|two"]);
    pool.releaseHold("c|one", 1);
    expect(pool.keyRoom("c|one")).toBe(1);
    b!.release();
    b!.release();
    expect(pool.inUse).toBe(1);
  });

  it("counts what a claim picked but did not start yet: one claim cannot give the reserve away", () => {
    const pool = new FairPool({ size: 16 });
    const picked = new Map<string, number>();
    // Two clients with backlogs and nothing in flight, picked in turns, as pickWithinRoom does.
    for (let turn = 0; turn < 20; turn++) {
      for (const c of ["a", "b"]) if (pool.room(c, picked) > 0) picked.set(c, (picked.get(c) ?? 0) + 1);
    }
    expect([picked.get("a"), picked.get("b")]).toEqual([7, 7]);
    expect(pool.room("third", picked)).toBeGreaterThan(0);
  });
});

describe("FairPool: slots taken back (#38.2)", () => {
  it.each([1, 2, 3])(
    "with %i hostile clients come one after another (the reserve taken too), a victim gets a slot at its first ask",
    (hostiles) => {
      for (const size of [4, 8, 32, 64]) {
        const pool = new FairPool({ size });
        const held = Array.from({ length: hostiles }, (_, i) => grab(pool, `hostile${i}`));
        expect(held[0]).toHaveLength(size - pool.reserve);
        const full = pool.free === 0;
        const uncounted = pool.runningUncounted;
        const victim = pool.tryAcquire("victim", "victim|h");
        expect(victim).not.toBeNull();
        expect(pool.inUse).toBeLessThanOrEqual(size);
        // A full pool gave it a slot taken back from the first hostile client; that work runs on uncounted.
        expect(pool.inUse + pool.runningUncounted).toBe(held.flat().length + 1);
        expect(pool.runningUncounted - uncounted).toBe(full ? 1 : 0);
        // Whatever the first one's work frees when it ends, what runs is what was started less it.
        for (const s of held[0]!) s.release();
        expect(pool.inUse + pool.runningUncounted).toBe(held.slice(1).flat().length + 1);
      }
    },
  );

  it("never more uncounted work than the pool: what runs stays within twice its size", () => {
    const pool = new FairPool({ size: 4 });
    grab(pool, "hostile");
    for (let i = 0; i < 10; i++) grab(pool, `c${i}`, `c${i}|h`, 1);
    expect(pool.runningUncounted).toBeLessThanOrEqual(4);
    expect(pool.inUse).toBeLessThanOrEqual(4);
  });
});

describe("FairPool.acquire: waiting for a slot", () => {
  it("a waiter gets the next freed slot it has room for, the client holding the fewest slots first", async () => {
    const pool = new FairPool({ size: 2, reserve: 0 });
    const held = [pool.tryAcquire("a", "a|h")!, pool.tryAcquire("b", "b|h")!];
    const aWaits = pool.acquire("a", "a|h", { waitMs: 5_000 });
    const cWaits = pool.acquire("c", "c|h", { waitMs: 5_000 });
    expect(pool.waitingCount).toBe(2);
    held[1]!.release();
    // c holds nothing, a holds one: c first, though a waited longer.
    const c = await cWaits;
    expect(c?.clientId).toBe("c");
    held[0]!.release();
    expect((await aWaits)?.clientId).toBe("a");
  });

  it("gives up after waitMs or when the signal aborts, and refuses at once past maxWaitingPerClient", async () => {
    vi.useFakeTimers();
    const pool = new FairPool({ size: 1, maxWaitingPerClient: 1 });
    const held = pool.tryAcquire("a", "a|h")!;
    const late = pool.acquire("b", "b|h", { waitMs: 1_000 });
    expect(await pool.acquire("b", "b|h", { waitMs: 1_000 })).toBeNull();
    vi.advanceTimersByTime(1_000);
    expect(await late).toBeNull();
    const abort = new AbortController();
    const abandoned = pool.acquire("b", "b|h", { waitMs: 60_000, signal: abort.signal });
    abort.abort();
    expect(await abandoned).toBeNull();
    expect(pool.waitingCount).toBe(0);
    held.release();
    expect(pool.inUse).toBe(0);
  });
});

/** One step of a random schedule: a client asks for a slot under one of its keys, takes all it may, or some slot is released. */
type Op =
  | { kind: "acquire" | "greedy"; client: number; key: number }
  | { kind: "release"; at: number; hold: boolean }
  | { kind: "unhold"; key: number; client: number };

const ops: fc.Arbitrary<Op[]> = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constantFrom("acquire" as const, "greedy" as const), client: fc.nat(4), key: fc.nat(2) }),
    fc.record({ kind: fc.constant("release" as const), at: fc.nat(), hold: fc.boolean() }),
    fc.record({ kind: fc.constant("unhold" as const), client: fc.nat(4), key: fc.nat(2) }),
  ),
  { maxLength: 200 },
);

describe("FairPool: properties over any schedule", () => {
  it("never over the pool or a key's cap; no client grows past its share; a client with nothing in flight gets a free slot no one waited for", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 40 }), ops, (size, perKey, schedule) => {
        const pool = new FairPool({ size, maxPerKey: perKey });
        const general = pool.size - pool.reserve;
        const held: Slot[] = [];
        const clients = ["c0", "c1", "c2", "c3", "c4"];
        const take = (client: string, key: string): boolean => {
          const holders = clients.filter((c) => pool.inFlightOf(c) > 0);
          const active = holders.length + (pool.inFlightOf(client) === 0 ? 1 : 0);
          const emptyHanded = pool.inFlightOf(client) === 0;
          // Free slots are kept first for the empty-handed clients that were refused before (#38.2).
          const inLine = pool.waitingClients().filter((c) => c !== client && pool.inFlightOf(c) === 0).length;
          const freeBefore = pool.free;
          const slot = pool.tryAcquire(client, key);
          if (emptyHanded && freeBefore > inLine && pool.keyRoom(key) + (slot ? 1 : 0) > 0) expect(slot).not.toBeNull();
          if (!slot) return false;
          held.push(slot);
          expect(pool.inFlightOf(client)).toBeLessThanOrEqual(Math.max(1, Math.floor(general / active)));
          return true;
        };
        for (const op of schedule) {
          if (op.kind === "release") {
            if (held.length > 0) held.splice(op.at % held.length, 1)[0]!.release({ holdKey: op.hold });
          } else if (op.kind === "unhold") {
            const key = `c${op.client}|${op.key}`;
            pool.releaseHold(key, pool.heldFor(key));
          } else {
            const client = `c${op.client}`;
            const key = `${client}|${op.key}`;
            if (op.kind === "acquire") take(client, key);
            else while (take(client, key));
          }
          // Work whose slot was taken back runs on uncounted: never more than the pool again.
          expect(pool.inUse + pool.runningUncounted).toBe(held.length);
          expect(pool.inUse).toBeLessThanOrEqual(pool.size);
          expect(held.length).toBeLessThanOrEqual(2 * pool.size);
          for (const c of clients) {
            expect(pool.inFlightOf(c)).toBeLessThanOrEqual(general);
            for (const k of [0, 1, 2])
              expect(pool.inFlightTo(`${c}|${k}`) + pool.heldFor(`${c}|${k}`)).toBeLessThanOrEqual(pool.maxPerKey);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it("a victim holding fewer than the reserve's level always gets a slot, whatever a greedy client holds and releases", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 80 }),
        fc.array(fc.oneof(fc.constant("grab" as const), fc.nat()), { maxLength: 100 }),
        (size, schedule) => {
          const pool = new FairPool({ size });
          const hostile: Slot[] = [];
          const victim: Slot[] = [];
          for (const step of schedule) {
            if (step === "grab") hostile.push(...grab(pool, "hostile"));
            else if (step % 3 === 0 && hostile.length > 0) hostile.splice(step % hostile.length, 1)[0]!.release();
            else if (step % 3 === 1 && victim.length > 0) victim.pop()!.release();
            // The victim's work became due: it is never refused while it holds fewer than its guaranteed slots.
            if (victim.length < Math.min(pool.reserveLevel, pool.reserve)) {
              const slot = pool.tryAcquire("victim", `victim|${victim.length}`);
              expect(slot).not.toBeNull();
              victim.push(slot!);
            }
            hostile.push(...grab(pool, "hostile"));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it("#38.2: with 1, 2 or 3 greedy clients holding the whole pool, a victim refused gets a slot at the first release it is next in line for", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 80 }),
        (size, hostiles, releases) => {
          const pool = new FairPool({ size });
          const hostile = Array.from({ length: hostiles }, (_, i) => `hostile${i}`);
          const held: Slot[] = [];
          // The hostile clients have endless backlogs: they ask after every change, one after another.
          const greedy = () => {
            for (const h of hostile) held.push(...grab(pool, h));
          };
          greedy();
          let victim = pool.tryAcquire("victim", "victim|h");
          // Clients refused before the victim may be served first, each once (taking a slot takes it out of
          // the line), when they hold as few: at most one release each.
          let ahead = pool.waitingClients().indexOf("victim");
          for (const at of releases) {
            if (victim) break;
            const before = pool.inUse;
            held.splice(at % held.length, 1)[0]!.release();
            // Work whose slot was taken back frees nothing when it ends.
            const freed = pool.inUse < before;
            // The freed slot's client asks first (it is the one whose work just ended), the victim after.
            greedy();
            victim = pool.tryAcquire("victim", "victim|h");
            if (!victim && freed) expect(ahead--).toBeGreaterThan(0);
          }
          expect(pool.inUse).toBeLessThanOrEqual(size);
        },
      ),
      { numRuns: 500 },
    );
  });
});

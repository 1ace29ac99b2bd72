import { describe, expect, it } from "vitest";
import { TurnBytes, TurnTime } from "../../src/next-turn.js";
import { turnCounter } from "../helpers/turn-counter.js";

describe("TurnBytes: one budget of bytes a turn for every large body in flight (issue #38 item 7)", () => {
  it("eight bodies copying together get at most the turn's bytes per turn, in the order they asked", async () => {
    const budget = new TurnBytes(1_000);
    const loop = turnCounter();
    const work: Array<{ body: number; slice: number; turn: number }> = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, body) => {
        for (let slice = 0; slice < 4; slice++) {
          await budget.take(300);
          work.push({ body, slice, turn: loop.now() });
        }
      }),
    );
    loop.stop();
    const perTurn = new Map<number, number>();
    for (const w of work) perTurn.set(w.turn, (perTurn.get(w.turn) ?? 0) + 300);
    // 3 slices of 300 fit in 1,000 bytes, a 4th does not: 32 slices take 11 turns at least.
    expect(Math.max(...perTurn.values())).toBe(900);
    expect(perTurn.size).toBeGreaterThanOrEqual(11);
    // First come, first served: every body's first slice before any body's second.
    expect(work.slice(0, 8).map((w) => w.slice)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it("a slice larger than the turn's budget still runs, alone in its turn", async () => {
    const budget = new TurnBytes(1_000);
    const loop = turnCounter();
    const turns: Record<string, number> = {};
    await Promise.all([
      budget.take(5_000).then(() => {
        turns.big = loop.now();
      }),
      budget.take(10).then(() => {
        turns.small = loop.now();
      }),
    ]);
    loop.stop();
    // Granted in order, the small one only in a later turn than the big one.
    expect(turns.small).toBeGreaterThan(turns.big!);
  });
});

describe("TurnTime: one clock a turn for background work (issue #38 item 7)", () => {
  /** Pieces that each run `ms` of work (on a clock moved by hand) once enter() lets them. */
  async function runPieces(count: number, ms: number, budgetMs: number) {
    let clock = 0;
    const gate = new TurnTime(budgetMs, () => clock);
    const loop = turnCounter();
    const ran: Array<{ piece: number; turn: number }> = [];
    await Promise.all(
      Array.from({ length: count }, async (_, piece) => {
        await gate.run(() => {
          ran.push({ piece, turn: loop.now() });
          clock += ms;
        });
      }),
    );
    loop.stop();
    const perTurn = new Map<number, number>();
    for (const r of ran) perTurn.set(r.turn, (perTurn.get(r.turn) ?? 0) + 1);
    return { ran, perTurn };
  }

  it("thirty pieces of 3 ms started together run at most a budget's worth a turn, in order", async () => {
    const { ran, perTurn } = await runPieces(30, 3, 10);
    // 10 ms lets 4 pieces of 3 ms start (at 0, 3, 6, 9): never more in one turn, and every piece runs.
    expect(ran).toHaveLength(30);
    expect(Math.max(...perTurn.values())).toBe(4);
    expect(perTurn.size).toBeGreaterThanOrEqual(8);
    expect(ran.map((r) => r.piece)).toEqual(Array.from({ length: 30 }, (_, i) => i));
  });

  it("a piece longer than the budget still runs, one a turn", async () => {
    const { ran, perTurn } = await runPieces(5, 25, 10);
    expect(ran).toHaveLength(5);
    expect(Math.max(...perTurn.values())).toBe(1);
  });

  it("the check phase grants only what is left of the clock its turn started, so one pass runs one budget", async () => {
    let clock = 0;
    const gate = new TurnTime(10, () => clock);
    const ran: number[] = [];
    const pieces = Array.from({ length: 8 }, (_, piece) =>
      gate.run(() => {
        ran.push(piece);
        clock += 4;
      }),
    );
    // Three ran at once (at 0, 4 and 8 ms); registered after them, this runs after the check phase's grant.
    expect(ran).toEqual([0, 1, 2]);
    const afterCheck = await new Promise<number[]>((resolve) => setImmediate(() => resolve([...ran])));
    // The clock already read 12 ms: the check phase grants its one piece, not another 10 ms of them.
    expect(afterCheck).toEqual([0, 1, 2, 3]);
    await Promise.all(pieces);
    expect(ran).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it("pieces within the budget run at once, without waiting for a turn; errors reach their caller", async () => {
    const gate = new TurnTime(10, () => 0);
    const ran: number[] = [];
    const both = [gate.run(() => ran.push(1)), gate.run(() => ran.push(2))];
    expect(ran).toEqual([1, 2]);
    await Promise.all(both);
    await expect(
      gate.run(() => {
        throw new Error("boom");
      }),
    ).rejects.toThrow("boom");
  });
});

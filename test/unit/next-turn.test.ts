import { describe, expect, it } from "vitest";
import { TurnBytes } from "../../src/next-turn.js";

/** Counts the turns of the event loop from now on (a setImmediate each turn) until stopped. */
function turnCounter(): { now: () => number; stop: () => void } {
  let turn = 0;
  let running = true;
  const tick = () => {
    turn++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    now: () => turn,
    stop: () => {
      running = false;
    },
  };
}

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

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PooledLoop, type PooledPort } from "../../src/workers/pooled-loop.js";

/** A promise and its resolver. */
function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * A port over a queue of numbered items, every step held until the test lets it go: each claim
 * waits on `claimGate`, each item runs until `settle(n)`. It counts what the loop must never do:
 * two claims at once, a slot past the pool's size, a claim or start after close.
 */
function heldPort(opts: { size: number; refills?: boolean }) {
  const due: number[] = [];
  const running = new Map<number, () => void>();
  const claims: Array<() => void> = [];
  const seen = { overlapping: 0, overSize: 0, afterClose: 0, claimsRun: 0, refills: 0, failures: 0 };
  let claimingNow = 0;
  let closed = false;
  const port: PooledPort<number> & { loop?: PooledLoop<number> } = {
    async claim(start) {
      if (closed) seen.afterClose += 1;
      claimingNow += 1;
      if (claimingNow > 1) seen.overlapping += 1;
      seen.claimsRun += 1;
      const gate = deferred();
      claims.push(gate.resolve);
      await gate.promise;
      const pool = port.loop!.pool;
      const room = pool.free;
      const taken = due.splice(0, room);
      for (const n of taken) start(n);
      claimingNow -= 1;
      return { full: taken.length >= room && room > 0 };
    },
    run(n) {
      if (closed) seen.afterClose += 1;
      const pool = port.loop!.pool;
      const slot = pool.take(`c${n % 3}`, `c${n % 3}`);
      if (pool.inUse > pool.size) seen.overSize += 1;
      const done = deferred();
      running.set(n, done.resolve);
      return done.promise
        .finally(() => slot.release())
        .then(() => {
          if (n % 7 === 0) throw new Error(`bookkeeping of ${n} failed`);
        });
    },
    async nextDueAt(full) {
      return full ? 0 : null;
    },
    failed() {
      seen.failures += 1;
    },
    ...(opts.refills
      ? {
          refill: async () => {
            seen.refills += 1;
            const r = await port.loop!.claimAndStart((start) => port.claim(start));
            return r.started.length > 0;
          },
        }
      : {}),
  };
  const loop = new PooledLoop(port, { size: opts.size });
  port.loop = loop;
  return {
    loop,
    port,
    due,
    seen,
    running,
    /** Lets the oldest waiting claim go on; false when none waits. */
    releaseClaim: () => {
      const next = claims.shift();
      next?.();
      return next !== undefined;
    },
    settle: (n: number) => {
      running.get(n)?.();
      running.delete(n);
    },
    markClosed: () => (closed = true),
  };
}

/** Lets every pending promise callback run. */
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
};

describe("PooledLoop: one claim at a time, drain, close", () => {
  it("a drain while a claim runs waits for the claim and for the work it started", async () => {
    const h = heldPort({ size: 4 });
    h.due.push(1, 2);
    const tick = h.loop.tick();
    await flush();
    let drained = false;
    const drain = h.loop.drain().then(() => (drained = true));
    await flush();
    expect(drained).toBe(false);
    h.releaseClaim();
    await tick;
    expect(h.loop.activeCount).toBe(2);
    await flush();
    expect(drained).toBe(false);
    h.settle(1);
    h.settle(2);
    await drain;
    expect(h.loop.activeCount).toBe(0);
  });

  it("close twice: both resolve, nothing is claimed or started after it", async () => {
    const h = heldPort({ size: 2 });
    h.due.push(1, 2, 3);
    const tick = h.loop.tick();
    await flush();
    const first = h.loop.close();
    const second = h.loop.close();
    h.releaseClaim();
    expect(await tick).toEqual({ didWork: true, nextDueAt: 0 });
    h.markClosed();
    h.settle(1);
    h.settle(2);
    await Promise.all([first, second]);
    await h.loop.close();
    expect(await h.loop.tick()).toEqual({ didWork: false, nextDueAt: null });
    expect(await h.loop.runOnce()).toBe(0);
    expect(h.seen.afterClose).toBe(0);
    expect(h.due).toEqual([3]);
  });

  it("a settle during a claim refills only after that claim, and wakes the loop when its refill found nothing", async () => {
    const h = heldPort({ size: 2, refills: true });
    const woken: string[] = [];
    h.loop.onSettled = () => woken.push("settled");
    h.due.push(1);
    const first = h.loop.tick();
    await flush();
    h.releaseClaim();
    await first;
    h.due.push(2);
    const second = h.loop.tick();
    await flush();
    h.settle(1); // settles while the second claim waits
    await flush();
    expect(h.seen.refills).toBe(1);
    expect(h.seen.overlapping).toBe(0);
    h.releaseClaim(); // the tick's claim takes 2
    await second;
    await flush();
    h.releaseClaim(); // then the refill's claim, which finds nothing
    await flush();
    expect(woken).toEqual(["settled"]);
    expect(h.seen.overlapping).toBe(0);
    h.settle(2);
    await flush();
    h.releaseClaim();
    await h.loop.drain();
  });

  it("a drain waits for a refill asked before its item settled (as its record was queued), draining or not", async () => {
    const h = heldPort({ size: 2 });
    const asked = deferred<boolean>();
    h.port.refill = () => asked.promise;
    h.port.refillAsked = (n) => n === 1;
    h.due.push(1);
    const tick = h.loop.tick();
    await flush();
    h.releaseClaim();
    await tick;
    h.settle(1);
    await flush();
    expect(h.loop.activeCount).toBe(0);
    let drained = false;
    const drain = h.loop.drain().then(() => (drained = true));
    await flush();
    expect(drained).toBe(false);
    asked.resolve(true);
    await drain;
    expect(drained).toBe(true);
  });

  it("stress: random ticks, runOnces, settles, drains and a close never overlap claims nor overfill the pool", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom("tick", "runOnce", "claim", "settle", "drain", "add"), {
          minLength: 10,
          maxLength: 60,
        }),
        fc.boolean(),
        async (ops, refills) => {
          const h = heldPort({ size: 3, refills });
          let next = 1;
          const pending: Promise<unknown>[] = [];
          for (const op of ops) {
            if (op === "add") h.due.push(next++, next++);
            else if (op === "tick") pending.push(h.loop.tick());
            else if (op === "runOnce") pending.push(h.loop.runOnce());
            else if (op === "drain") pending.push(h.loop.drain());
            else if (op === "claim") h.releaseClaim();
            else if (op === "settle") {
              const first = h.running.keys().next();
              if (!first.done) h.settle(first.value);
            }
            await flush();
          }
          const closing = [h.loop.close(), h.loop.close()];
          // Let everything still held go: claims, then the work they started, until all is quiet.
          for (let i = 0; i < 100 && (h.releaseClaim() || h.running.size > 0); i++) {
            for (const n of [...h.running.keys()]) h.settle(n);
            await flush();
          }
          await Promise.all([...closing, ...pending]);
          expect(h.seen.overlapping).toBe(0);
          expect(h.seen.overSize).toBe(0);
          expect(h.loop.activeCount).toBe(0);
          expect(h.loop.pool.inUse).toBe(0);
          expect(await h.loop.tick()).toEqual({ didWork: false, nextDueAt: null });
        },
      ),
      { numRuns: 60 },
    );
  });
});

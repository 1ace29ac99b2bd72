import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../../src/config.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { silentLogger } from "../../src/logger.js";
import { pgStore } from "../../src/open-store.js";
import { Dispatcher } from "../../src/workers/dispatcher.js";
import { LeaseOwner } from "../../src/workers/owner.js";
import { sendResult, type SendResult, type WebhookSender } from "../../src/webhooks/sender.js";
import { eventsOf, NOW } from "../helpers/conformance.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { freshPgDatabase } from "../helpers/pg.js";

/**
 * Two dispatchers on one PostgreSQL database, one delivery key at its cap across them: one instance
 * holds every attempt the key may have (maxPerKey), and the other's pool, which cannot see those
 * leases, must not claim the key again at every turn of its loop to find nothing
 * (src/workers/dispatcher.ts, noteSaturated). Fake time drives both loops; deliveries end when the
 * test says so.
 */
const HOST_URL = "https://hooks.example/hook";
const CAP = 4;
let db: { url: string; drop: () => Promise<void> };
const stores: PgStore[] = [];

beforeEach(async () => {
  db = await freshPgDatabase();
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const s of stores.splice(0)) await s.close();
  await db.drop();
});

/** A sender whose attempts stay open until `finish` ends the oldest with a 200. */
function heldSender() {
  const open: Array<(r: SendResult) => void> = [];
  const sender = {
    send: () => new Promise<SendResult>((resolve) => open.push(resolve)),
  } as unknown as WebhookSender;
  return {
    sender,
    open: () => open.length,
    finish: () => open.shift()?.(sendResult({ ok: true, statusCode: 200, latencyMs: 1 })),
  };
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

async function instance(clock: FakeClock) {
  const store = await pgStore(db.url, { migrate: false, max: 4 });
  stores.push(store);
  const config = loadConfig({
    DATABASE_URL: db.url,
    UPSTREAM_BASE_URL: "http://simulator.local",
    UPSTREAM_API_KEY: "sim-key",
    WEBHOOK_RETRY_SCHEDULE: "0s,1h",
    LOG_LEVEL: "silent",
  });
  const held = heldSender();
  const dispatcher = new Dispatcher({
    store,
    clock,
    config,
    logger: silentLogger,
    sender: held.sender,
    owner: new LeaseOwner(),
    maxInFlight: 16,
    maxPerHost: CAP,
  });
  return { store, dispatcher, held };
}

/**
 * One instance's dispatcher loop in fake time, as WorkerLoop runs it: a tick, then the next one at
 * once after work, else at its next due time but no sooner than `minGapMs` (WorkerLoop's 25 ms).
 */
function fakeLoop(d: Dispatcher, clock: FakeClock, minGapMs: number) {
  let wakeAt = clock.now();
  return async () => {
    while (clock.now() >= wakeAt) {
      const r = await d.tick();
      const now = clock.now();
      wakeAt = r.didWork ? now : Math.max(now + minGapMs, r.nextDueAt ?? now + 30_000);
    }
  };
}

describe("a key at its cap across instances", () => {
  for (const stepMs of [25, 5]) {
    it(`is not claimed again by the instance without its leases at every turn of its loop (loop every ${stepMs} ms)`, async () => {
      const clock = new FakeClock(NOW);
      const a = await instance(clock);
      const b = await instance(clock);
      const { events } = await eventsOf(a.store, 40, HOST_URL);
      expect(events).toHaveLength(40);

      // B takes the whole cap of the key; its attempts stay open.
      await b.dispatcher.tick();
      await until("B's attempts", () => b.held.open() === CAP);

      const claimDue = vi.spyOn(a.store.events, "claimDue");
      const nextDueAt = vi.spyOn(a.store.events, "nextDueAt");
      const claimOfKey = vi.spyOn(a.store.events, "claimOfKey");
      const loopA = fakeLoop(a.dispatcher, clock, stepMs);

      // Two seconds of fake time: one of B's attempts ends every 100 ms, and B refills the key from its backlog.
      let delivered = 0;
      for (let t = 0; t < 2_000; t += stepMs) {
        if (t % 100 === 0 && t > 0) {
          b.held.finish();
          delivered += 1;
          await until("B's refill", () => b.held.open() === CAP && b.dispatcher.activeCount === CAP);
        }
        await loopA();
        clock.advance(stepMs);
      }
      const drained = b.dispatcher.drain();
      while (b.held.open() > 0) b.held.finish();
      await drained;

      // The key stayed at its cap across the two: A never held an attempt of it.
      expect(a.held.open()).toBe(0);
      expect(delivered).toBe(19);
      // A's statements about the key: a few back-offs' worth, not one or two per turn of its loop.
      const statements = claimDue.mock.calls.length + nextDueAt.mock.calls.length + claimOfKey.mock.calls.length;
      expect(statements / delivered).toBeLessThan(1);
      expect(claimDue.mock.calls.length).toBeLessThanOrEqual(8);
    });
  }
});

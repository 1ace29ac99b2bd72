import { describe, expect, it } from "vitest";
import {
  busyKeys,
  excludedKeys,
  firstCoolDownMs,
  keyRoom,
  nextSaturationBackoff,
  noteSaturation,
  pausedTrialUntil,
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

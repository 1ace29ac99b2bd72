import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  afterHarvest,
  costOfAll,
  endedCandidates,
  HARVEST_MIN,
  isDue,
  LIST_RETRY_MS,
  LOST_AFTER_MS,
  MAX_PACE_FACTOR,
  MAX_SWEEP_INTERVAL_MS,
  MIN_SWEEP_INTERVAL_MS,
  newListState,
  nextReadAt,
  nextTickAt,
  oldestOfEachKind,
  planSingles,
  planSweep,
  PROBE_READS,
  probeInterval,
  probeOutcome,
  QUIET_FULL_MS,
  readFailed,
  SINGLE_BATCH,
  sweepFailed,
  sweepInterval,
  sweepKind,
  sweepOutcome,
  sweepReadCap,
  sweepShare,
  sweepsCover,
  worthHarvesting,
  type AccountView,
  type ListState,
  type SweepResult,
  type UpstreamFailure,
} from "../../src/core/poll-plan.js";
import { nextPollDelay } from "../../src/core/poll-schedule.js";
import type { TaskStatus } from "../../src/statuses.js";
import type { InFlightTask } from "../../src/store/store.js";
import type { UpstreamTask } from "../../src/upstream/types.js";

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const BUDGET = { windowMs: 61_000, perMinute: 100 };

function state(patch: Partial<ListState> = {}): ListState {
  return { ...newListState(), ...patch };
}

function view(patch: Partial<AccountView> = {}): AccountView {
  return { strategy: "adaptive", running: 10, now: NOW, state: state({ nextSweepAt: NOW - 1 }), ...patch };
}

function task(n: number, patch: Partial<InFlightTask> = {}): InFlightTask {
  return {
    id: `task_${n}`,
    upstreamTaskId: `up_${n}`,
    status: "processing",
    submittedAt: NOW - 60_000,
    type: "image",
    model: "m",
    ...patch,
  };
}

function remote(id: string, status: TaskStatus | null, patch: Partial<UpstreamTask> = {}): UpstreamTask {
  const ended = status === "succeeded";
  return {
    id,
    status,
    output: ended ? { images: ["x"] } : null,
    usage: {
      pointsCharged: status && status !== "queued" && status !== "processing" ? 10 : null,
      pointsRefunded: null,
    },
    error: null,
    raw: {},
    ...patch,
  };
}

function result(seen: UpstreamTask[], patch: Partial<SweepResult> = {}): SweepResult {
  return { seen: new Map(seen.map((t) => [t.id, t])), reads: 1, complete: true, unsupported: false, ...patch };
}

function failure(patch: Partial<NonNullable<UpstreamFailure>>): UpstreamFailure {
  return { status: 500, code: "internal_error", retryAfterMs: null, requestId: "req_1", message: "boom", ...patch };
}

describe("planSweep: whether this tick sweeps the account's list", () => {
  it("skip: round-robin, fewer than three tasks running, or a list body not understood until unsupportedUntil", () => {
    expect(planSweep(view({ strategy: "round-robin" }), { available: 100, perMinute: 100 })).toEqual({ kind: "skip" });
    expect(planSweep(view({ running: 2 }), { available: 100, perMinute: 100 })).toEqual({ kind: "skip" });
    expect(planSweep(view({ running: 0 }), { available: 100, perMinute: 100 })).toEqual({ kind: "skip" });
    expect(
      planSweep(view({ state: state({ unsupportedUntil: NOW + 1 }) }), { available: 100, perMinute: 100 }),
    ).toEqual({ kind: "skip" });
    // The retry time itself: the list is tried again.
    expect(
      planSweep(view({ running: 3, state: state({ unsupportedUntil: NOW }) }), { available: 100, perMinute: 100 }),
    ).toEqual({ kind: "sweep", sweep: "all" });
  });

  it("later: sweeps cover the account but the next one is not due", () => {
    expect(planSweep(view({ state: state({ nextSweepAt: NOW + 1 }) }), { available: 100, perMinute: 100 })).toEqual({
      kind: "later",
    });
  });

  it("sweep when the budget holds the reads the last sweep of that kind took (two when unmeasured), else wait for them", () => {
    const few = view({ state: state({ nextSweepAt: NOW - 1, lastEnded: 1 }) });
    expect(planSweep(few, { available: 2, perMinute: 100 })).toEqual({ kind: "sweep", sweep: "active" });
    expect(planSweep(few, { available: 1, perMinute: 100 })).toEqual({ kind: "wait", reads: 2 });
    expect(planSweep(few, { available: 0, perMinute: 100 })).toEqual({ kind: "wait", reads: 2 });
    const measured = view({ state: state({ cost: { active: 7, all: null }, lastEnded: 1 }) });
    expect(planSweep(measured, { available: 6, perMinute: 100 })).toEqual({ kind: "wait", reads: 7 });
    expect(planSweep(measured, { available: 7, perMinute: 100 })).toEqual({ kind: "sweep", sweep: "active" });
    // Never more than the whole budget: a sweep dearer than a minute's reads waits for the minute.
    expect(planSweep(measured, { available: 5, perMinute: 5 })).toEqual({ kind: "sweep", sweep: "active" });
    // A cost of one read still waits for two.
    expect(
      planSweep(view({ state: state({ cost: { active: 1, all: null }, lastEnded: 1 }) }), {
        available: 1,
        perMinute: 100,
      }),
    ).toEqual({ kind: "wait", reads: 2 });
  });

  it("probe while the account is quiet (one read, waiting for it when none is free); the full sweep once QUIET_FULL_MS has passed since the last", () => {
    const quiet = (lastFullAt: number) =>
      view({ state: state({ quiet: true, lastFullAt, nextSweepAt: NOW - 1, fullRunning: 10 }) });
    expect(planSweep(quiet(NOW - 1_000), { available: 1, perMinute: 100 })).toEqual({ kind: "probe" });
    expect(planSweep(quiet(NOW - 1_000), { available: 0, perMinute: 100 })).toEqual({ kind: "wait", reads: 1 });
    expect(planSweep(quiet(NOW - QUIET_FULL_MS), { available: 100, perMinute: 100 })).toEqual({
      kind: "sweep",
      sweep: "all",
    });
    // Tasks submitted since the last full sweep (10 then, 11 now): the full sweep.
    expect(planSweep({ ...quiet(NOW - 1_000), running: 11 }, { available: 100, perMinute: 100 })).toEqual({
      kind: "sweep",
      sweep: "all",
    });
    // Not where the unfiltered list leaves out tasks of ours: the active lists' full sweep.
    const blind = view({
      state: state({
        quiet: true,
        lastFullAt: NOW - 1_000,
        nextSweepAt: NOW - 1,
        fullRunning: 10,
        cost: { active: 5, all: Infinity },
      }),
    });
    expect(planSweep(blind, { available: 100, perMinute: 100 })).toEqual({ kind: "sweep", sweep: "active" });
    // Not yet due: later, as for a sweep.
    expect(
      planSweep(view({ state: state({ quiet: true, lastFullAt: NOW, nextSweepAt: NOW + 1 }) }), {
        available: 100,
        perMinute: 100,
      }),
    ).toEqual({ kind: "later" });
  });
});

describe("sweepKind: the active lists or the unfiltered list", () => {
  const ending = { lastEnded: HARVEST_MIN, harvestUseful: true, cost: { active: 5, all: null } };
  it("all when none ended last time (the pass finds where the oldest task in flight is), unless the unfiltered list is out", () => {
    expect(sweepKind(state({ lastEnded: 0 }))).toBe("all");
    expect(sweepKind(state({ lastEnded: 0, cost: { active: 3, all: 9 } }))).toBe("all");
    expect(sweepKind(state({ lastEnded: 0, cost: { active: 3, all: Infinity } }))).toBe("active");
  });

  it("active while few tasks end, the unfiltered list is out, the active cost is unmeasured, or harvests bring no output", () => {
    expect(sweepKind(state({ ...ending, lastEnded: HARVEST_MIN - 1 }))).toBe("active");
    expect(sweepKind(state({ ...ending, cost: { active: 5, all: Infinity } }))).toBe("active");
    expect(sweepKind(state({ ...ending, cost: { active: null, all: 1 } }))).toBe("active");
    expect(sweepKind(state({ ...ending, harvestUseful: false }))).toBe("active");
  });

  it("all while tasks end, unless it measured dearer than the active sweep with its harvest", () => {
    expect(sweepKind(state(ending))).toBe("all");
    expect(sweepKind(state({ ...ending, harvestUseful: null }))).toBe("all");
    expect(sweepKind(state({ ...ending, cost: { active: 5, all: 5 } }))).toBe("all");
    expect(sweepKind(state({ ...ending, cost: { active: 5, all: 6 } }))).toBe("active");
  });
});

describe("planSingles: which tasks are read one by one", () => {
  it("wait when no read is free", () => {
    expect(planSingles(view(), 0, ["task_1"])).toEqual({ kind: "wait" });
    expect(planSingles(view({ strategy: "round-robin" }), 0, [])).toEqual({ kind: "wait" });
  });

  it("due tasks, at most SINGLE_BATCH and what the budget has, while no sweep covers the account", () => {
    expect(planSingles(view({ strategy: "round-robin" }), 100, ["task_1"])).toEqual({
      kind: "due",
      limit: SINGLE_BATCH,
    });
    expect(planSingles(view({ running: 2 }), 7, [])).toEqual({ kind: "due", limit: 7 });
    expect(
      planSingles(view({ state: state({ nextSweepAt: NOW - 1, unsupportedUntil: NOW + 1 }) }), 3, ["task_1"]),
    ).toEqual({ kind: "due", limit: 3 });
    // Sweeps would cover it but none has run yet: nothing is flagged, the tasks are read singly meanwhile.
    expect(planSingles(view({ state: state({ nextSweepAt: 0 }) }), 3, [])).toEqual({ kind: "due", limit: 3 });
  });

  it("only the flagged tasks once sweeps cover the account, as many as the budget allows", () => {
    const flagged = Array.from({ length: 40 }, (_, i) => `task_${i}`);
    expect(planSingles(view(), 2, flagged)).toEqual({ kind: "ids", ids: ["task_0", "task_1"] });
    expect(planSingles(view(), 100, flagged)).toEqual({ kind: "ids", ids: flagged.slice(0, SINGLE_BATCH) });
    expect(planSingles(view(), 100, new Set<string>())).toEqual({ kind: "ids", ids: [] });
    // Swept before, next sweep later: still covered.
    expect(planSingles(view({ state: state({ nextSweepAt: NOW + 30_000 }) }), 5, ["task_9"])).toEqual({
      kind: "ids",
      ids: ["task_9"],
    });
  });

  it("sweepsCover agrees with planSweep: no sweep is planned where sweeps do not cover", () => {
    expect(sweepsCover(view())).toBe(true);
    expect(sweepsCover(view({ running: 2 }))).toBe(false);
  });
});

describe("the sweep's share of the budget", () => {
  it("oldestOfEachKind: the oldest task per type and model; a task not yet stamped counts as submitted now", () => {
    const a = task(1, { submittedAt: NOW - 5_000 });
    const b = task(2, { submittedAt: NOW - 9_000 });
    const c = task(3, { type: "video", submittedAt: null });
    const d = task(4, { model: "other", submittedAt: NOW - 1_000 });
    const e = task(5, { type: "video", submittedAt: NOW - 1 });
    expect(oldestOfEachKind([a, b, c, d, e], NOW).map((t) => t.id)).toEqual(["task_2", "task_5", "task_4"]);
    expect(oldestOfEachKind([], NOW)).toEqual([]);
  });

  it("isDue: once a task has run its kind's early quantile, or at once when nothing is learned", () => {
    expect(isDue(task(1, { submittedAt: NOW - 10_000 }), 10_000, NOW)).toBe(true);
    expect(isDue(task(1, { submittedAt: NOW - 9_999 }), 10_000, NOW)).toBe(false);
    expect(isDue(task(1, { submittedAt: NOW }), null, NOW)).toBe(true);
    expect(isDue(task(1, { submittedAt: null }), 1, NOW)).toBe(false);
  });

  it("sweepShare: half before anything is due, all of it once due, three quarters while single reads wait", () => {
    expect(sweepShare(false, 0)).toBe(0.5);
    expect(sweepShare(false, 9)).toBe(0.5);
    expect(sweepShare(true, 0)).toBe(1);
    expect(sweepShare(true, 1)).toBe(0.75);
  });

  it("sweepReadCap: the share of what is free, never below two reads", () => {
    expect(sweepReadCap(100, 1)).toBe(100);
    expect(sweepReadCap(10, 0.75)).toBe(7);
    expect(sweepReadCap(3, 0.5)).toBe(2);
    expect(sweepReadCap(0, 1)).toBe(2);
  });
});

describe("what the list reads tell", () => {
  it("costOfAll: what a complete pass took; out (Infinity) when the list ended without every task; unchanged when cut short or not understood", () => {
    expect(costOfAll(null, result([], { reads: 3, complete: true }), 10)).toBe(3);
    expect(costOfAll(4, result([], { reads: 3, complete: false }), 10)).toBe(Infinity);
    expect(costOfAll(4, result([], { reads: 10, complete: false }), 10)).toBe(4);
    expect(costOfAll(null, result([], { reads: 1, complete: false, unsupported: true }), 10)).toBeNull();
  });

  it("endedCandidates: tasks a complete active sweep did not show, submitted before it began (a list page that misses tasks)", () => {
    const inFlight = [
      task(1),
      task(2),
      task(3, { submittedAt: NOW }),
      task(4, { upstreamTaskId: null }),
      task(5, { submittedAt: null }),
    ];
    const seen = result([remote("up_1", "processing")]);
    expect([...endedCandidates(inFlight, seen, NOW)]).toEqual(["up_2", "up_5"]);
    // Cut short: absence means nothing.
    expect([...endedCandidates(inFlight, { ...seen, complete: false }, NOW)]).toEqual([]);
  });

  it("worthHarvesting: enough candidates, a list understood, and harvests not known to come without output", () => {
    const three = new Set(["up_1", "up_2", "up_3"]);
    expect(worthHarvesting(result([]), three, state())).toBe(true);
    expect(worthHarvesting(result([]), three, state({ harvestUseful: true }))).toBe(true);
    expect(worthHarvesting(result([]), new Set(["up_1", "up_2"]), state())).toBe(false);
    expect(worthHarvesting(result([], { unsupported: true }), three, state())).toBe(false);
    expect(worthHarvesting(result([]), three, state({ harvestUseful: false }))).toBe(false);
  });

  it("afterHarvest: the active cost when not cut short, whether succeeded items carry output, the candidates still unseen", () => {
    const candidates = new Set(["up_1", "up_2", "up_3"]);
    const withOutput = afterHarvest(
      state(),
      result([remote("up_1", "succeeded"), remote("up_2", "failed")], { reads: 4 }),
      candidates,
      10,
    );
    expect(withOutput).toEqual({ active: 4, harvestUseful: true, unseen: new Set(["up_3"]) });
    const bare = afterHarvest(
      state({ cost: { active: 2, all: null } }),
      result([remote("up_1", "succeeded", { output: null })], { reads: 10 }),
      candidates,
      10,
    );
    expect(bare).toEqual({ active: 2, harvestUseful: false, unseen: new Set(["up_2", "up_3"]) });
    // Only failed ones found: nothing learned about outputs.
    expect(
      afterHarvest(state({ harvestUseful: true }), result([remote("up_2", "failed")]), candidates, 10).harvestUseful,
    ).toBe(true);
  });
});

describe("sweepOutcome: what a sweep means for each task", () => {
  const input = (inFlight: InFlightTask[], r: SweepResult, candidates: string[] = []) => ({
    inFlight,
    result: r,
    candidates: new Set(candidates),
    now: NOW,
    share: 1,
    budget: BUDGET,
  });

  it("a list body not understood: single reads only for LIST_RETRY_MS", () => {
    expect(sweepOutcome(input([task(1)], result([], { unsupported: true })))).toEqual({
      kind: "unsupported",
      unsupportedUntil: NOW + LIST_RETRY_MS,
    });
  });

  it("each task: settled or changed tasks are recorded, ended ones the list cannot settle are flagged, the rest wait for the next sweep", () => {
    const inFlight = [
      task(1), // still processing: covered, unchanged
      task(2, { status: "queued" }), // now processing: changed
      task(3), // succeeded with output and charge: settled
      task(4), // succeeded without output: one single read
      task(5), // failed without a charge: one single read
      task(6), // failed, charged 0: settled
      task(7), // missing from complete active lists: a candidate, flagged
      task(8), // missing but not a candidate (submitted during the sweep): waits
      task(9, { upstreamTaskId: null }), // no upstream id: waits
      task(10), // seen with a status we do not know: one single read
      task(11, { status: "queued" }), // still queued: covered, unchanged
      task(12), // canceled, charged: settled
    ];
    const r = result(
      [
        remote("up_1", "processing"),
        remote("up_2", "processing"),
        remote("up_3", "succeeded"),
        remote("up_4", "succeeded", { output: null }),
        remote("up_5", "failed", { usage: { pointsCharged: null, pointsRefunded: null } }),
        remote("up_6", "failed", { usage: { pointsCharged: 0, pointsRefunded: null } }),
        remote("up_10", null),
        remote("up_11", "queued"),
        remote("up_12", "canceled"),
      ],
      { reads: 2 },
    );
    const out = sweepOutcome(input(inFlight, r, ["up_7"]));
    expect(out).toEqual({
      kind: "read",
      nextSweepAt: NOW + 1_220,
      coveredUntil: NOW + 2 * 1_220 + 5_000,
      ended: 6,
      covered: 6,
      changed: ["task_2", "task_3", "task_6", "task_12"],
      flag: ["task_4", "task_5", "task_7", "task_10"],
      quiet: false,
      passMs: 1_220,
    });
  });

  it("paces sweeps over the budget's window at their share, between one second and a minute", () => {
    const at = (reads: number, share: number, perMinute: number) => {
      // A task seen ended: not quiet, so the next full sweep is paced.
      const out = sweepOutcome({
        ...input([task(1)], result([remote("up_1", "succeeded")], { reads })),
        share,
        budget: { windowMs: 61_000, perMinute },
      });
      return out.kind === "read" ? out.nextSweepAt - NOW : null;
    };
    expect(at(0, 1, 100)).toBe(MIN_SWEEP_INTERVAL_MS);
    expect(at(10, 0.5, 100)).toBe(12_200);
    expect(at(200, 0.5, 10)).toBe(MAX_SWEEP_INTERVAL_MS);
    expect(sweepInterval(5, 1, BUDGET)).toBe(3_050);
  });

  it("quiet when nothing ended (tasks only starting to run do not count): a probe comes next, within probeInterval", () => {
    const out = sweepOutcome({ ...input([task(1)], result([remote("up_1", "processing")], { reads: 10 })), share: 1 });
    expect(out).toMatchObject({ kind: "read", quiet: true, nextSweepAt: NOW + probeInterval(BUDGET) });
    expect(probeInterval(BUDGET)).toBe((PROBE_READS * 61_000) / 100);
    const started = sweepOutcome(input([task(1, { status: "queued" })], result([remote("up_1", "processing")])));
    expect(started).toMatchObject({ quiet: true, changed: ["task_1"] });
    const ended = sweepOutcome(input([task(1)], result([remote("up_1", "succeeded")])));
    expect(ended).toMatchObject({ quiet: false, changed: ["task_1"] });
    const flagged = sweepOutcome(input([task(1)], result([]), ["up_1"]));
    expect(flagged).toMatchObject({ quiet: false, flag: ["task_1"] });
  });

  it("while tasks end, reads a quiet spell left unspent go faster, less one sweep's, never below the steady pace nor above MAX_PACE_FACTOR times it", () => {
    const steady = sweepInterval(5, 1, BUDGET);
    const paced = (inWindow: number, remaining: number, endedPerS: number, share = 1) =>
      sweepInterval(5, share, { ...BUDGET, readsInLast: () => inWindow }, { remaining, endedPerMs: endedPerS / 1000 });
    // 30 reads in the window, 300 tasks ending at 10/s (30 s): (100 - 30 - 5) reads over 30 s.
    expect(paced(30, 300, 10)).toBe(Math.round(5 / (65 / 30_000)));
    expect(paced(30, 300, 10)).toBeLessThan(steady);
    // A full window, or nothing ending, or not every read for sweeps: the steady pace.
    expect(paced(100, 300, 10)).toBe(steady);
    expect(paced(30, 300, 0)).toBe(steady);
    expect(paced(30, 300, 10, 0.5)).toBe(sweepInterval(5, 0.5, BUDGET));
    // An empty window and a few tasks ending at once: at most MAX_PACE_FACTOR times the steady pace.
    expect(paced(0, 20, 20)).toBe(Math.max(MIN_SWEEP_INTERVAL_MS, Math.round(steady / MAX_PACE_FACTOR)));
    // What the window counts is what will still be in it at the horizon's end.
    let asked = 0;
    sweepInterval(5, 1, { ...BUDGET, readsInLast: (ms) => ((asked = ms), 0) }, { remaining: 100, endedPerMs: 0.01 });
    expect(asked).toBe(61_000 - 10_000);
  });

  it("probeOutcome: a task in flight shown ended brings the full sweep at once; one shown in another running status is recorded, and the next probe comes", () => {
    const seen = (status: TaskStatus) => new Map([["up_1", remote("up_1", status)]]);
    const next = NOW + probeInterval(BUDGET);
    expect(probeOutcome([task(1)], seen("processing"), NOW, BUDGET)).toEqual({
      ended: false,
      changed: [],
      nextSweepAt: next,
    });
    expect(probeOutcome([task(1)], seen("succeeded"), NOW, BUDGET)).toEqual({
      ended: true,
      changed: [],
      nextSweepAt: NOW,
    });
    expect(probeOutcome([task(1)], seen("failed"), NOW, BUDGET).ended).toBe(true);
    expect(probeOutcome([task(1, { status: "queued" })], seen("processing"), NOW, BUDGET)).toEqual({
      ended: false,
      changed: ["task_1"],
      nextSweepAt: next,
    });
    // A task not on the page tells nothing.
    expect(probeOutcome([task(2)], seen("succeeded"), NOW, BUDGET).ended).toBe(false);
  });

  it("probes never come less often than full passes would at their steady pace (a one-page pass: a probe saves nothing)", () => {
    // A pass of one page at the whole budget: every 0.61 s of pace, clamped to MIN_SWEEP_INTERVAL_MS.
    const onePage = sweepOutcome({
      ...input([task(1)], result([remote("up_1", "processing")], { reads: 1 })),
      share: 1,
    });
    expect(onePage).toMatchObject({ kind: "read", quiet: true, passMs: MIN_SWEEP_INTERVAL_MS });
    expect(onePage.kind === "read" && onePage.nextSweepAt).toBe(NOW + MIN_SWEEP_INTERVAL_MS);
    const slow = { windowMs: 61_000, perMinute: 20 };
    // 20 reads a minute: a one-page pass every 3.05 s at the whole budget, 6.1 s at half; a probe's own pace is 9.15 s.
    expect(probeInterval(slow)).toBe(9_150);
    expect(probeInterval(slow, sweepInterval(1, 1, slow))).toBe(3_050);
    expect(probeInterval(slow, sweepInterval(1, 0.5, slow))).toBe(6_100);
    expect(
      probeOutcome([task(1)], new Map([["up_1", remote("up_1", "processing")]]), NOW, slow, 3_050).nextSweepAt,
    ).toBe(NOW + 3_050);
    // Passes of several pages: the probes' own pace, faster than the passes'.
    expect(probeInterval(BUDGET, sweepInterval(5, 1, BUDGET))).toBe(probeInterval(BUDGET));
  });

  it("zero tasks in flight: nothing recorded or flagged", () => {
    expect(sweepOutcome(input([], result([remote("up_x", "succeeded")])))).toMatchObject({
      ended: 0,
      covered: 0,
      changed: [],
      flag: [],
    });
  });
});

describe("after a failed sweep", () => {
  it("a transport error or a 5xx: the list again in five seconds", () => {
    expect(sweepFailed(null, NOW)).toEqual({ nextSweepAt: NOW + 5_000, pauseUntil: null, unsupportedUntil: null });
    expect(sweepFailed(failure({}), NOW)).toEqual({
      nextSweepAt: NOW + 5_000,
      pauseUntil: null,
      unsupportedUntil: null,
    });
  });

  it("a 429 pauses the account's reads (Retry-After, else ten seconds)", () => {
    expect(sweepFailed(failure({ status: 429, code: "rate_limit", retryAfterMs: 3_000 }), NOW)).toEqual({
      nextSweepAt: NOW + 3_000,
      pauseUntil: NOW + 3_000,
      unsupportedUntil: null,
    });
    expect(sweepFailed(failure({ status: 429, code: "rate_limit" }), NOW)).toEqual({
      nextSweepAt: NOW + 5_000,
      pauseUntil: NOW + 10_000,
      unsupportedUntil: null,
    });
  });

  it("a page too large: single reads only for LIST_RETRY_MS", () => {
    expect(sweepFailed(failure({ status: 200, code: "response_too_large" }), NOW).unsupportedUntil).toBe(
      NOW + LIST_RETRY_MS,
    );
  });
});

describe("single reads", () => {
  it("nextReadAt: round-robin reads again at once; adaptive by the task's age and its kind's learned duration", () => {
    const t = { type: "video" as const, submittedAt: NOW - 20_000, createdAt: NOW - 30_000 };
    expect(nextReadAt(t, NOW, "round-robin", 5_000)).toBe(NOW);
    expect(nextReadAt(t, NOW, "adaptive", 50_000)).toBe(NOW + 30_000);
    expect(nextReadAt(t, NOW, "adaptive", null)).toBe(NOW + nextPollDelay("video", 20_000, null));
    // Not yet stamped as submitted: its age counts from creation.
    expect(nextReadAt({ ...t, submittedAt: null }, NOW, "adaptive", 50_000)).toBe(NOW + 20_000);
  });

  it("nextReadAt: a task past its expected end is read at a quarter of how late it is, at most a minute on", () => {
    const t = { type: "image" as const, submittedAt: NOW - 30_000, createdAt: NOW - 30_000 };
    expect(nextReadAt(t, NOW, "adaptive", 10_000)).toBe(NOW + 5_000);
    expect(nextReadAt({ ...t, submittedAt: NOW - 3_600_000 }, NOW, "adaptive", 10_000)).toBe(NOW + 60_000);
  });

  it("readFailed: an answer too large ends the task, saying it may have been charged", () => {
    expect(
      readFailed(
        { pollCount: 0 },
        failure({ status: 200, code: "response_too_large", message: "answer over 8 MiB" }),
        NOW,
        undefined,
      ),
    ).toEqual({
      kind: "too_large",
      error: {
        code: "upstream_response_too_large",
        message: "answer over 8 MiB. The task may have been charged: check the upstream account.",
        request_id: "req_1",
      },
    });
  });

  it("readFailed: a 429 pauses until Retry-After (ten seconds without one)", () => {
    expect(
      readFailed({ pollCount: 3 }, failure({ status: 429, code: "rate_limit", retryAfterMs: 2_500 }), NOW, undefined),
    ).toEqual({ kind: "paused", until: NOW + 2_500 });
    expect(readFailed({ pollCount: 3 }, failure({ status: 429, code: "rate_limit" }), NOW, NOW - 1)).toEqual({
      kind: "paused",
      until: NOW + 10_000,
    });
  });

  it("readFailed: 5xx, network errors and HTML 404s back off by the reads made, up to a minute, and start no 404 run", () => {
    expect(readFailed({ pollCount: 0 }, failure({}), NOW, undefined)).toEqual({
      kind: "retry",
      at: NOW + 2_000,
      pollCount: 1,
    });
    expect(readFailed({ pollCount: 3 }, null, NOW, undefined)).toEqual({
      kind: "retry",
      at: NOW + 16_000,
      pollCount: 4,
    });
    expect(readFailed({ pollCount: 5 }, failure({}), NOW, undefined)).toEqual({
      kind: "retry",
      at: NOW + 60_000,
      pollCount: 6,
    });
    expect(readFailed({ pollCount: 40 }, failure({}), NOW, undefined)).toEqual({
      kind: "retry",
      at: NOW + 60_000,
      pollCount: 41,
    });
    expect(readFailed({ pollCount: 0 }, failure({ status: 404, code: "http_404" }), NOW, NOW - LOST_AFTER_MS)).toEqual({
      kind: "retry",
      at: NOW + 2_000,
      pollCount: 1,
    });
  });

  it("readFailed: JSON 404 task_not_found starts or continues a run; a task past LOST_AFTER_MS of them is lost", () => {
    const notFound = failure({ status: 404, code: "task_not_found" });
    expect(readFailed({ pollCount: 0 }, notFound, NOW, undefined)).toEqual({
      kind: "retry",
      at: NOW + 2_000,
      pollCount: 1,
      notFoundSince: NOW,
    });
    expect(readFailed({ pollCount: 1 }, notFound, NOW, NOW - LOST_AFTER_MS + 1)).toEqual({
      kind: "retry",
      at: NOW + 4_000,
      pollCount: 2,
      notFoundSince: NOW - LOST_AFTER_MS + 1,
    });
    expect(readFailed({ pollCount: 9 }, notFound, NOW, NOW - LOST_AFTER_MS)).toEqual({
      kind: "lost",
      error: {
        code: "task_not_found",
        message:
          "The upstream answered 404 task_not_found for this task for 10 minutes; it is taken as lost. It may have been charged: check the upstream account.",
        request_id: "req_1",
      },
    });
  });
});

describe("nextTickAt", () => {
  it("the earliest due task, or the tick's own wake-up when that is sooner or nothing is due later", () => {
    expect(nextTickAt(null, null, NOW)).toBeNull();
    expect(nextTickAt(NOW + 5, null, NOW)).toBe(NOW + 5);
    expect(nextTickAt(null, NOW + 7, NOW)).toBe(NOW + 7);
    expect(nextTickAt(NOW + 10, NOW + 7, NOW)).toBe(NOW + 7);
    expect(nextTickAt(NOW + 5, NOW + 7, NOW)).toBe(NOW + 5);
    // Due already (held back by the budget, say): the wake-up says when reading can go on.
    expect(nextTickAt(NOW, NOW + 7, NOW)).toBe(NOW + 7);
  });
});

describe("properties", () => {
  const arbState = fc.record({
    nextSweepAt: fc.integer({ min: NOW - 120_000, max: NOW + 120_000 }),
    cost: fc.record({
      active: fc.option(fc.integer({ min: 0, max: 300 })),
      all: fc.option(fc.oneof(fc.integer({ min: 0, max: 300 }), fc.constant(Infinity))),
    }),
    lastEnded: fc.nat(50),
    unsupportedUntil: fc.oneof(fc.constant(0), fc.integer({ min: NOW - 60_000, max: NOW + 60_000 })),
    harvestUseful: fc.option(fc.boolean()),
    warned: fc.boolean(),
    quiet: fc.boolean(),
    lastFullAt: fc.integer({ min: 0, max: NOW }),
    fullRunning: fc.nat(1_000),
    tailCursor: fc.option(fc.string()),
    passMs: fc.oneof(fc.constant(Number.POSITIVE_INFINITY), fc.integer({ min: 1_000, max: 60_000 })),
  });
  const arbView = fc.record({
    strategy: fc.constantFrom("adaptive" as const, "round-robin" as const),
    running: fc.nat(1_000),
    now: fc.constant(NOW),
    state: arbState,
  });

  it("a plan never spends more reads than the budget grants: sweeps only with their reads free and capped by what is free, singles within what is free", () => {
    fc.assert(
      fc.property(
        arbView,
        fc.integer({ min: 2, max: 1_000 }),
        fc.integer({ min: -5, max: 1_000 }),
        fc.boolean(),
        fc.nat(2),
        fc.array(fc.string(), { maxLength: 60 }),
        (v, perMinute, free, due, waiting, flagged) => {
          const available = Math.min(free, perMinute);
          const step = planSweep(v, { available, perMinute });
          if (step.kind === "sweep") {
            expect(sweepReadCap(available, sweepShare(due, waiting))).toBeLessThanOrEqual(available);
          }
          if (step.kind === "wait") expect(step.reads).toBeGreaterThan(available);
          if (step.kind !== "skip") expect(sweepsCover(v)).toBe(true);
          const singles = planSingles(v, available, flagged);
          if (available <= 0) expect(singles.kind).toBe("wait");
          if (singles.kind === "due") expect(singles.limit).toBeLessThanOrEqual(Math.min(available, SINGLE_BATCH));
          if (singles.kind === "ids") {
            expect(singles.ids.length).toBeLessThanOrEqual(Math.min(available, SINGLE_BATCH));
            expect(singles.ids.every((id) => flagged.includes(id))).toBe(true);
          }
        },
      ),
    );
  });

  const statuses: Array<TaskStatus | null> = ["queued", "processing", "succeeded", "failed", "canceled", null];
  const arbTask = fc.record({
    n: fc.nat(30),
    hasUpstream: fc.boolean(),
    stored: fc.constantFrom<TaskStatus>("queued", "processing"),
    listed: fc.option(
      fc.record({ status: fc.constantFrom(...statuses), output: fc.boolean(), charged: fc.option(fc.nat(100)) }),
    ),
    candidate: fc.boolean(),
  });

  it("every in-flight task the sweep saw end is recorded or flagged for one single read, never both; every other task was seen running or waits for the next sweep, which is scheduled", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(arbTask, { selector: (t) => t.n, maxLength: 30 }),
        fc.nat(20),
        fc.constantFrom(0.5, 0.75, 1),
        (specs, reads, share) => {
          const inFlight = specs.map((s) =>
            task(s.n, { upstreamTaskId: s.hasUpstream ? `up_${s.n}` : null, status: s.stored }),
          );
          const seen = specs.flatMap((s) =>
            s.hasUpstream && s.listed
              ? [
                  remote(`up_${s.n}`, s.listed.status, {
                    output: s.listed.output ? { x: 1 } : null,
                    usage: { pointsCharged: s.listed.charged, pointsRefunded: null },
                  }),
                ]
              : [],
          );
          const candidates = specs.filter((s) => s.hasUpstream && s.candidate && !s.listed).map((s) => `up_${s.n}`);
          const out = sweepOutcome({
            inFlight,
            result: result(seen, { reads }),
            candidates: new Set(candidates),
            now: NOW,
            share,
            budget: BUDGET,
          });
          if (out.kind !== "read") throw new Error("a sweep that was understood");
          const changed = new Set(out.changed);
          const flag = new Set(out.flag);
          expect(changed.size).toBe(out.changed.length);
          expect(flag.size).toBe(out.flag.length);
          expect([...changed].filter((id) => flag.has(id))).toEqual([]);
          for (const s of specs) {
            const id = `task_${s.n}`;
            const status = s.hasUpstream ? (s.listed?.status ?? null) : null;
            const ended = status === "succeeded" || status === "failed" || status === "canceled";
            const running = status === "queued" || status === "processing";
            if (ended || (s.hasUpstream && candidates.includes(`up_${s.n}`)))
              expect(changed.has(id) || flag.has(id)).toBe(true);
            else if (!changed.has(id) && !flag.has(id)) expect(running || !s.listed || !s.hasUpstream).toBe(true);
            if (running) expect(flag.has(id)).toBe(false);
          }
          expect(out.nextSweepAt - NOW).toBeGreaterThanOrEqual(MIN_SWEEP_INTERVAL_MS);
          expect(out.nextSweepAt - NOW).toBeLessThanOrEqual(MAX_SWEEP_INTERVAL_MS);
          expect(out.coveredUntil).toBeGreaterThan(out.nextSweepAt);
        },
      ),
    );
  });

  it("a failed read is never retried in the past or more than a minute on, and a task is lost only after LOST_AFTER_MS of JSON 404s", () => {
    fc.assert(
      fc.property(
        fc.nat(100),
        fc.option(
          fc.record({
            status: fc.constantFrom(404, 429, 500, 502, 200),
            code: fc.constantFrom("task_not_found", "rate_limit", "internal_error", "response_too_large", "http_404"),
            retryAfterMs: fc.option(fc.integer({ min: 1, max: 60_000 })),
          }),
        ),
        fc.option(fc.integer({ min: 0, max: 2 * LOST_AFTER_MS }), { nil: undefined }),
        (pollCount, e, runFor) => {
          const err = e === null ? null : failure(e);
          const plan = readFailed({ pollCount }, err, NOW, runFor === undefined ? undefined : NOW - runFor);
          const notFound = err?.status === 404 && err.code === "task_not_found";
          if (plan.kind === "retry") {
            expect(plan.at).toBeGreaterThan(NOW);
            expect(plan.at - NOW).toBeLessThanOrEqual(60_000);
            expect(plan.pollCount).toBe(pollCount + 1);
            if (plan.notFoundSince !== undefined) expect(plan.notFoundSince).toBeLessThanOrEqual(NOW);
            expect(plan.notFoundSince !== undefined).toBe(notFound);
          }
          if (plan.kind === "paused") expect(plan.until).toBeGreaterThan(NOW);
          expect(plan.kind === "lost").toBe(notFound && (runFor ?? 0) >= LOST_AFTER_MS);
        },
      ),
    );
  });
});

describe("the poller's ports", () => {
  it("the poller and its list reader import no services and take no whole Store", () => {
    for (const file of [
      "src/workers/poller.ts",
      "src/workers/list-sweep.ts",
      "src/workers/poll/ports.ts",
      "src/workers/poll/single-reads.ts",
      "src/workers/poll/early-records.ts",
    ]) {
      const source = readFileSync(file, "utf8");
      expect(source, file).not.toMatch(/from "\.\.\/services\//);
      expect(source, file).not.toMatch(/:\s*Store\b/);
    }
  });
});

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { transitionRules } from "../../src/core/transition.js";
import type { TaskRow } from "../../src/store/rows.js";
import { planTransition } from "../../src/store/transition-plan.js";

/**
 * What a task change writes is planned once, before anything is written (#24): the drivers apply
 * the plan. These check the plan itself, with no database.
 */
const NOW = Date.UTC(2026, 0, 1);
const opts = { now: NOW, token: null, firstAttemptDelayMs: 250 };

function task(over: Partial<TaskRow> = {}): TaskRow {
  return {
    id: "task_1",
    clientId: "cli_1",
    type: "image",
    model: "p-image",
    status: "queued",
    phase: "waiting",
    requestJson: "{}",
    callbackUrl: "https://hooks.example.com/x",
    callbackEvents: JSON.stringify(["task.processing", "task.succeeded", "task.failed", "task.canceled"]),
    metadataJson: null,
    idempotencyKey: "k",
    requestHash: "h",
    upstreamAccount: "default",
    upstreamIdempotencyKey: "genrelay-task_1",
    upstreamTaskId: null,
    outputJson: null,
    pointsCharged: null,
    pointsRefunded: null,
    errorJson: null,
    pointsReserved: 30,
    priceKey: "image:p-image",
    conflictSince: null,
    eventSequence: 2,
    submitAttempts: 0,
    pollCount: 0,
    nextRunAt: NOW,
    claimedUntil: null,
    claimToken: null,
    expiresAt: null,
    createdAt: NOW - 1000,
    updatedAt: NOW - 1000,
    submittedAt: null,
    completedAt: null,
    callbackHeaders: null,
    filesJson: null,
    storedBytes: 0,
    traceparent: null,
    tracestate: null,
    outputRef: null,
    ...over,
  };
}

describe("planTransition", () => {
  it("a task that starts running: its event carries the estimated end from the model's median, null while unknown", () => {
    const start = {
      status: "processing" as const,
      phase: "submitted" as const,
      submittedAt: NOW - 4_000,
      updatedAt: NOW,
    };
    const known = planTransition(transitionRules, task(), start, { ...opts, expectedDurationMs: 10_000 });
    expect(JSON.parse(known.event!.payload).data.estimated_completion_at).toBe(new Date(NOW + 6_000).toISOString());
    // Overdue: never an end in the past.
    const overdue = planTransition(transitionRules, task(), start, { ...opts, expectedDurationMs: 1_000 });
    expect(JSON.parse(overdue.event!.payload).data.estimated_completion_at).toBe(new Date(NOW).toISOString());
    const unknown = planTransition(transitionRules, task(), start, opts);
    expect(JSON.parse(unknown.event!.payload).data.estimated_completion_at).toBeNull();
    // An ended task has none, whatever the caller knows.
    const ended = planTransition(
      transitionRules,
      task({ status: "processing", phase: "submitted", submittedAt: NOW - 4_000 }),
      { status: "succeeded", phase: "done", completedAt: NOW, updatedAt: NOW },
      { ...opts, expectedDurationMs: 10_000 },
    );
    expect(JSON.parse(ended.event!.payload).data.estimated_completion_at).toBeNull();
  });

  it("a new status: the event's sequence goes into the row's patch, the event is due after the first-attempt delay", () => {
    const plan = planTransition(
      transitionRules,
      task(),
      { status: "processing", phase: "submitted", updatedAt: NOW },
      opts,
    );
    expect(plan.event).toMatchObject({
      type: "task.processing",
      sequence: 3,
      taskId: "task_1",
      nextAttemptAt: NOW + 250,
      deliveryStatus: "pending",
    });
    expect(plan.patch).toEqual({ status: "processing", phase: "submitted", updatedAt: NOW, eventSequence: 3 });
    expect(plan.after).toEqual({
      ...task(),
      status: "processing",
      phase: "submitted",
      updatedAt: NOW,
      eventSequence: 3,
    });
    expect(JSON.parse(plan.event!.payload).data.sequence).toBe(3);
    // Nothing charged, nothing released: the books are untouched.
    expect(plan.credit).toBeNull();
  });

  it("a charge ends the reservation: the books get the charge and the released points, the price is learned, waiting tasks wake", () => {
    const plan = planTransition(
      transitionRules,
      task({ status: "processing", phase: "submitted" }),
      { status: "succeeded", phase: "done", pointsCharged: 25 },
      opts,
    );
    expect(plan.patch.pointsReserved).toBe(0);
    expect(plan.credit).toEqual({ charged: 25, refunded: 0, reserved: -30 });
    expect(plan.learn).toEqual({ priceKey: "image:p-image", points: 25 });
    expect(plan.wake).toBe(true);
    expect(plan.event?.type).toBe("task.succeeded");
  });

  it("no new status: no event, and an unsubscribed status writes none either", () => {
    expect(planTransition(transitionRules, task(), { nextRunAt: NOW + 5000 }, opts).event).toBeNull();
    const unsubscribed = task({ callbackEvents: JSON.stringify(["task.succeeded"]) });
    const plan = planTransition(transitionRules, unsubscribed, { status: "processing", phase: "submitted" }, opts);
    expect(plan.event).toBeNull();
    expect(plan.patch.eventSequence).toBeUndefined();
  });

  it("undefined leaves a column as it is; a lone surrogate is planned as U+FFFD (what both drivers store)", () => {
    const plan = planTransition(
      transitionRules,
      task(),
      { upstreamTaskId: undefined, errorJson: "bad \ud800 text" },
      opts,
    );
    expect("upstreamTaskId" in plan.patch).toBe(false);
    expect(plan.patch.errorJson).toBe("bad \ufffd text");
    expect(plan.after.errorJson).toBe("bad \ufffd text");
  });

  it("property: the planned row is the row before with the patch's defined values, and the event (if any) is numbered after the row's last", () => {
    const patchArb = fc.record(
      {
        status: fc.constantFrom("queued", "processing", "succeeded", "failed", "canceled" as const),
        pointsCharged: fc.option(fc.nat(1000), { nil: undefined }),
        pollCount: fc.nat(50),
        nextRunAt: fc.option(fc.nat(), { nil: undefined }),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(patchArb, fc.nat(20), (patch, seq) => {
        const before = task({ eventSequence: seq, status: "processing", phase: "submitted" });
        const plan = planTransition(transitionRules, before, patch as Partial<TaskRow>, opts);
        for (const [k, v] of Object.entries(patch))
          if (v !== undefined) expect(plan.after[k as keyof TaskRow]).toEqual(v);
        expect(plan.after).toEqual({ ...before, ...plan.patch });
        if (plan.event) expect(plan.event.sequence).toBe(seq + 1);
        else expect(plan.after.eventSequence).toBe(seq);
      }),
    );
  });
});

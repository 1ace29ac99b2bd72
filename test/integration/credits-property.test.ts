import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { creditPosition } from "../../src/db/sqlite/clients.js";
import { listForSupport as listTasksForSupport } from "../../src/db/sqlite/tasks.js";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Property (issue #10): over random interleavings of creations, submissions, charges, refunds and
 * failures, a limited client's points charged (net of refunds) plus points reserved never exceed its
 * credit limit. The one overshoot the relay cannot rule out is documented in services/credits.ts:
 * the first task of a price nobody has seen yet costing more than all the room it was given. The
 * property allows exactly that and nothing else.
 */
const suite = upstreamSuite();
const LIMIT = 200;

/** Kinds of request: one the published table prices (20), two the relay must learn (true price drawn per run). */
const KINDS = [
  { model: "p-image", extra: { quality: "low", size: "1K" } },
  { model: "flux-lite", extra: {} },
  { model: "flux-lite", extra: { aspect_ratio: "16:9" } },
] as const;

type Step =
  | { op: "create"; kind: number }
  | { op: "submit" }
  | { op: "poll" }
  | { op: "end"; pick: number; how: "succeeded" | "failed-refunded" | "failed-kept" };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant("create" as const), kind: fc.integer({ min: 0, max: 2 }) }),
  fc.constant({ op: "submit" as const }),
  fc.constant({ op: "poll" as const }),
  fc.record({
    op: fc.constant("end" as const),
    pick: fc.nat(),
    how: fc.constantFrom("succeeded" as const, "failed-refunded" as const, "failed-kept" as const),
  }),
);

/**
 * How the upstream writes a task's charge (issue #22): honestly, as a digit string, or not in a way
 * the relay may trust (missing, negative, fractional). Credit limits hold whatever it says.
 */
const CHARGE_MODES = ["number", "string", "missing", "negative", "fractional"] as const;
type ChargeMode = (typeof CHARGE_MODES)[number];

function written(mode: ChargeMode, price: number): { points_charged?: unknown } {
  if (mode === "number") return { points_charged: price };
  if (mode === "string") return { points_charged: String(price) };
  if (mode === "negative") return { points_charged: -1000 * price };
  if (mode === "fractional") return { points_charged: price + 0.5 };
  return {};
}

/** What the fake upstream charges each kind: the table's price for kind 0, drawn prices for the others, written as `modes` say. */
function priceUpstream(up: FakeUpstream, prices: number[], modes: ChargeMode[]): void {
  for (const [i, call] of up.creates.entries()) {
    const id = up.taskOf(String(call.key).replace(/^genrelay-/, ""))?.id;
    if (!id) continue;
    const kind = KINDS.findIndex(
      (k) =>
        k.model === call.body.model &&
        (k.extra as Record<string, unknown>).aspect_ratio === call.body.aspect_ratio &&
        (k.extra as Record<string, unknown>).quality === call.body.quality,
    );
    const task = up.tasks.get(id)!;
    if (task.usage?.points_refunded === undefined)
      up.set(id, { usage: written(modes[i % modes.length]!, prices[kind]!) });
  }
}

describe("credit budget property", () => {
  it("charged + reserved ≤ limit after every step, and refused tasks never reach the upstream", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 5, maxLength: 40 }),
        fc.integer({ min: 5, max: 120 }),
        fc.integer({ min: 5, max: 120 }),
        fc.array(fc.constantFrom(...CHARGE_MODES), { minLength: 1, maxLength: 12 }),
        async (steps, p1, p2, modes) => {
          const { t, up } = suite.setup();
          const { apiKey, id: clientId } = t.client("limited", { creditLimit: LIMIT });
          const prices = [20, p1, p2];
          let allowance = 0;
          const charged = new Set<number>([0]);
          let n = 0;
          for (const s of steps) {
            if (s.op === "create") {
              const kind = KINDS[s.kind]!;
              const res = await t.request(apiKey, "/openapi/v1/images/generations", {
                method: "POST",
                json: { model: kind.model, mode: "generate", prompt: "a property test", count: 1, ...kind.extra },
                idempotencyKey: `prop-key-${n++}`,
              });
              expect([201, 402]).toContain(res.status);
            } else if (s.op === "submit") {
              await t.relay.submitter.runOnce();
              priceUpstream(up, prices, modes);
            } else if (s.op === "poll") {
              const before = new Map(open(t).map((row) => [row.id, row]));
              t.clock.advance(3_000);
              await t.relay.poller.runOnce();
              for (const row of listTasksForSupport(t.database.db, { limit: 1000 })) {
                const was = before.get(row.id);
                // A task that ends holding a reservation is never charged "free" (issue #22): its charge
                // is one the upstream gave and the relay trusts, or the reservation itself.
                if (was && row.phase === "done" && was.pointsReserved > 0 && row.submitAttempts > 0) {
                  expect(row.pointsCharged).not.toBeNull();
                  expect(row.pointsCharged).toBeGreaterThanOrEqual(0);
                }
                if (!was || was.pointsCharged !== null || row.pointsCharged === null) continue;
                const kind = prices.indexOf(row.pointsCharged);
                // First charge of a price the relay did not know, for a task that held all the room it
                // was given (a task in flight with nothing reserved is a bug, not an excuse): the only
                // overshoot allowed.
                if (!charged.has(kind) && kind > 0 && was.pointsReserved > 0)
                  allowance += Math.max(0, row.pointsCharged - was.pointsReserved);
                charged.add(kind);
              }
            } else {
              const running = [...up.tasks.values()].filter((x) => x.status === "queued" || x.status === "processing");
              const victim = running[s.pick % Math.max(1, running.length)];
              if (victim) {
                const c = victim.usage?.points_charged ?? 0;
                if (s.how === "succeeded")
                  up.set(victim.id, { status: "succeeded", output: { images: ["https://cdn.test/x.png"] } });
                else
                  up.set(victim.id, {
                    status: "failed",
                    usage: { points_charged: c, ...(s.how === "failed-refunded" ? { points_refunded: c } : {}) },
                  });
              }
            }
            const p = creditPosition(t.database.db, clientId)!;
            expect(p.charged - p.refunded + p.reserved).toBeLessThanOrEqual(LIMIT + allowance);
            expect(p.charged - p.refunded).toBeGreaterThanOrEqual(0);
            // The books agree with the rows (nothing is pruned here).
            const rows = listTasksForSupport(t.database.db, { limit: 1000 });
            expect(p.reserved).toBe(rows.reduce((sum, r) => sum + (r.phase === "done" ? 0 : r.pointsReserved), 0));
            expect(p.charged).toBe(rows.reduce((sum, r) => sum + (r.pointsCharged ?? 0), 0));
          }
          for (const row of listTasksForSupport(t.database.db, { limit: 1000 })) {
            if (row.errorJson && JSON.parse(row.errorJson).code === "insufficient_points") {
              expect(row.submitAttempts).toBe(0);
              expect(up.taskOf(row.id)).toBeUndefined();
            }
          }
        },
      ),
      { numRuns: 25 },
    );
  }, 120_000);
});

function open(t: TestRelay) {
  return listTasksForSupport(t.database.db, { limit: 1000 }).filter((r) => r.phase !== "done");
}

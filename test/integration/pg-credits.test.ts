import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { decideSubmission, intakeReservation } from "../../src/core/credits.js";
import { rollUpLedger } from "../../src/db/pg/credit-books.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { pgStore } from "../../src/open-store.js";
import type { IntakeContext, SubmissionContext, SubmissionStep } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { CONTRACT_NOW, contractClient, contractTask } from "../helpers/store-dialects.js";

/**
 * Issue #32, "no hot row per client": on PostgreSQL a client's credit books are summed on read and
 * its deciders take turns on an advisory lock (src/db/pg/credit-books.ts), so its tasks go from
 * creation to charge without writing or waiting for its row, and the limit still holds when several
 * stores decide at once.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const NOW = CONTRACT_NOW;
const opts = (token: string | null = null) => ({ now: NOW, token, firstAttemptDelayMs: 0 });

async function stores(n: number): Promise<{ url: string; all: PgStore[] }> {
  const db = await freshPgDatabase();
  const all: PgStore[] = [];
  for (let i = 0; i < n; i++) all.push(await pgStore(db.url, { migrate: false, max: 6 }));
  cleanups.push(async () => {
    for (const s of all) await s.close().catch(() => {});
    await db.drop();
  });
  return { url: db.url, all };
}

/** Intake's check (core/credits.ts) on what the store read under the client's credit lock. */
const admitPriced =
  (price: number) =>
  (ctx: IntakeContext): number => {
    const verdict = intakeReservation(ctx.position, price);
    if ("refuse" in verdict) throw new Error(verdict.refuse);
    return verdict.reserve;
  };

/** The submitter's decision (core/credits.ts), as the lifecycle applies it. */
function submit(ctx: SubmissionContext): SubmissionStep<"go" | "wait" | "refuse"> {
  const verdict = decideSubmission(ctx);
  if (verdict.kind === "go")
    return {
      kind: "go",
      transition: true,
      patch: { status: "processing", phase: "submitted", submitAttempts: 1, pointsReserved: verdict.reserve },
    };
  return { kind: verdict.kind === "wait" ? "wait" : "refuse", transition: false, patch: { nextRunAt: NOW + 60_000 } };
}

/** Settles with "done", or "blocked" when `work` is still waiting after a while (the failure this file guards against). */
function unlessBlocked(work: Promise<unknown>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const blocked = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve("blocked"), 10_000);
  });
  return Promise.race([work.then(() => "done"), blocked]).finally(() => clearTimeout(timer));
}

describe("PostgreSQL: no hot row per client", () => {
  it("a limited client's tasks are created, submitted, charged and evented while its row is locked, and never write it", async () => {
    const { url, all } = await stores(1);
    const store = all[0]!;
    const c = await contractClient(store, { creditLimit: 1_000 });
    const version = async () =>
      (await store.pool.query("SELECT xmin::text AS v FROM clients WHERE id = $1", [c.id])).rows[0].v as string;
    // A known price: each submission reserves it (an unknown one would take the whole room).
    await store.pool.query("INSERT INTO learned_prices (price_key, points, updated_at) VALUES ('pk-hot', 10, $1)", [
      NOW,
    ]);
    const before = await version();
    // Another transaction holds the lock an UPDATE of the client takes (an operator editing it, say).
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    cleanups.push(() => holder.end());
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM clients WHERE id = $1 FOR NO KEY UPDATE", [c.id]);

    const lifecycle = async (i: number): Promise<TaskRow> => {
      const req = contractTask(c.id, `hot-${i}`, {}, { admit: admitPriced(10) });
      const { task } = await store.tasks.create({ ...req, row: { ...req.row, priceKey: "pk-hot" } });
      const [leased] = await store.tasks.claimIds([task.id], "waiting", { now: NOW, leaseMs: 30_000, token: `s:${i}` });
      const begun = await store.tasks.beginSubmission(task.id, `s:${i}`, submit, opts(`s:${i}`));
      expect(begun?.kind).toBe("go");
      expect(leased).toBeDefined();
      return (await store.tasks.transition(
        begun!.task,
        { status: "succeeded", phase: "done", pointsCharged: 8, completedAt: NOW },
        opts(),
      ))!;
    };
    const work = Promise.all(Array.from({ length: 8 }, (_, i) => lifecycle(i)));
    expect(await unlessBlocked(work)).toBe("done");
    const done = await work;
    expect(done.map((t) => [t.status, t.pointsReserved])).toEqual(done.map(() => ["succeeded", 0]));
    expect(await store.clients.creditPosition(c.id)).toEqual({
      charged: 64,
      refunded: 0,
      reserved: 0,
      limit: 1_000,
      revoked: false,
    });
    // Each task wrote two events and a charge: the client's row is still the version it was.
    expect(await version()).toBe(before);
    await holder.query("COMMIT");
  });

  it("creations and submissions bursting on three stores never take a client past its limit", async () => {
    const { all } = await stores(3);
    const [store] = all;
    const c = await contractClient(store!, { creditLimit: 100 });
    await store!.pool.query("INSERT INTO learned_prices (price_key, points, updated_at) VALUES ('pk', 30, $1)", [NOW]);
    // Ten waiting tasks that reserved nothing at intake; each submission takes the learned 30.
    const waiting: TaskRow[] = [];
    for (let i = 0; i < 10; i++) {
      const req = contractTask(c.id, `late-${i}`, {}, { needs: { waiting: false, credit: false } });
      waiting.push((await store!.tasks.create({ ...req, row: { ...req.row, priceKey: "pk" } })).task);
    }
    for (const [i, t] of waiting.entries())
      await all[i % 3]!.tasks.claimIds([t.id], "waiting", { now: NOW, leaseMs: 30_000, token: `s:${i}` });
    const submissions = waiting.map((t, i) =>
      all[i % 3]!.tasks.beginSubmission(t.id, `s:${i}`, submit, opts(`s:${i}`)),
    );
    // Meanwhile creations that reserve 10 each, on every store.
    const creations = Promise.allSettled(
      Array.from({ length: 12 }, (_, i) =>
        all[i % 3]!.tasks.create(contractTask(c.id, `burst-${i}`, {}, { admit: admitPriced(10) })),
      ),
    );
    const begun = await Promise.all(submissions);
    const created = await creations;
    const went = begun.filter((b) => b?.kind === "go").length;
    const admitted = created.filter((r) => r.status === "fulfilled").length;
    const p = (await store!.clients.creditPosition(c.id))!;
    expect(p.reserved).toBe(went * 30 + admitted * 10);
    expect(p.charged - p.refunded + p.reserved).toBeLessThanOrEqual(100);
    expect(went + admitted).toBeGreaterThan(0);
    // What the decisions saw is what is stored: the tasks' own reservations sum to the position.
    const stored = await store!.pool.query(
      "SELECT coalesce(sum(points_reserved), 0) AS n FROM tasks WHERE client_id = $1",
      [c.id],
    );
    expect(Number(stored.rows[0].n)).toBe(p.reserved);
  });

  it("charges past the roll-up threshold are folded into the client's totals once, the position unchanged", async () => {
    const { all } = await stores(2);
    const [a, b] = all;
    const c = await contractClient(a!, { creditLimit: 1_000_000 });
    const charge = async (i: number) => {
      const { task } = await a!.tasks.create(contractTask(c.id, `roll-${i}`, { reserve: 5 }));
      await all[i % 2]!.tasks.transition(
        task,
        { status: "failed", phase: "done", pointsCharged: 3, pointsRefunded: 1, completedAt: NOW },
        opts(),
      );
    };
    for (let i = 0; i < 70; i++) await charge(i);
    const rolled = async () =>
      Number(
        (await a!.pool.query("SELECT count(*) AS n FROM credit_ledger WHERE client_id = $1 AND rolled_up", [c.id]))
          .rows[0].n,
      );
    // The reads of the creations rolled the first 64 up, beside them (not awaited by the read).
    while ((await rolled()) < 64) await new Promise((resolve) => setImmediate(resolve));
    expect(await a!.clients.creditPosition(c.id)).toMatchObject({ charged: 210, refunded: 70, reserved: 0 });
    // Two roll-ups at once, from two stores: each row is folded once.
    await Promise.all([rollUpLedger(a!.pool, c.id), rollUpLedger(b!.pool, c.id)]);
    expect(await rolled()).toBe(70);
    expect(await a!.clients.creditPosition(c.id)).toMatchObject({ charged: 210, refunded: 70, reserved: 0 });
    const row = await a!.pool.query("SELECT points_charged, points_refunded FROM clients WHERE id = $1", [c.id]);
    expect([Number(row.rows[0].points_charged), Number(row.rows[0].points_refunded)]).toEqual([210, 70]);
    expect(await a!.clients.ledger(c.id)).toHaveLength(70);
  });

  it("a price already learned is not written again by each completion that teaches it", async () => {
    const { all } = await stores(1);
    const store = all[0]!;
    const c = await contractClient(store);
    const complete = async (key: string, charged: number) => {
      const req = contractTask(c.id, key);
      const { task } = await store.tasks.create({ ...req, row: { ...req.row, priceKey: "pk-same" } });
      await store.tasks.transition(
        task,
        { status: "succeeded", phase: "done", pointsCharged: charged, completedAt: NOW },
        opts(),
      );
    };
    const learned = async () =>
      (await store.pool.query("SELECT points, xmin::text AS v FROM learned_prices WHERE price_key = 'pk-same'"))
        .rows[0] as { points: string; v: string };
    await complete("first", 12);
    const first = await learned();
    await complete("second", 12);
    expect(await learned()).toEqual(first);
    await complete("third", 14);
    expect(Number((await learned()).points)).toBe(14);
  });
});

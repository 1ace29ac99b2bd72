import { afterEach, describe, expect, it } from "vitest";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import { contractClient, contractTask, CONTRACT_NOW } from "../helpers/store-dialects.js";
import { memoryStore } from "../helpers/memory-store.js";
import { findLearnedPrice } from "../../src/db/sqlite/clients.js";

const opts = (token: string | null, now: number) => ({ now, token, firstAttemptDelayMs: 0 });

type Connection = SqliteStore["database"]["sqlite"];

/** Every SQL text the connection prepares from now on (each once: the store keeps its statements). */
function preparedTexts(sqlite: Connection): string[] {
  const texts: string[] = [];
  const prepare = sqlite.prepare.bind(sqlite);
  sqlite.prepare = ((source: string) => {
    texts.push(source);
    return prepare(source);
  }) as typeof sqlite.prepare;
  return texts;
}

/** SQLite's plan of a statement, its `?` bound as NULL (the plan does not depend on the values). */
function planOf(sqlite: Connection, text: string): string[] {
  const params = Array.from({ length: text.split("?").length - 1 }, () => null);
  const rows = sqlite.prepare(`EXPLAIN QUERY PLAN ${text}`).all(...params) as { detail: string }[];
  return rows.map((r) => r.detail);
}

/**
 * Issue #43: SQLite rewrites the entries of every index on a column an UPDATE's SET names, and runs
 * its `UPDATE OF` triggers, whether the value changes or not. A transition names columns it leaves as
 * they are (a poll's status, the points, a done task's error and output ref): those stay out of its
 * UPDATE. Observed with a temporary `UPDATE OF` trigger per column, which fires only when the SET
 * names the column.
 */
describe("a transition's write on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  /** How often an UPDATE of tasks named each of `columns` from now on. */
  function named(s: SqliteStore, columns: string[]): () => Record<string, number> {
    const { sqlite } = s.database;
    sqlite.exec("CREATE TEMP TABLE named (col TEXT NOT NULL)");
    for (const col of columns)
      sqlite.exec(
        `CREATE TEMP TRIGGER named_${col} AFTER UPDATE OF ${col} ON main.tasks BEGIN INSERT INTO named VALUES ('${col}'); END`,
      );
    return () =>
      Object.fromEntries(
        columns.map((col) => [
          col,
          sqlite.prepare("SELECT count(*) FROM named WHERE col = ?").pluck().get(col) as number,
        ]),
      );
  }

  it("names only the columns whose value changes; a patch that changes nothing writes nothing", async () => {
    store = memoryStore();
    const c = await contractClient(store);
    const { task: t } = await store.tasks.create(contractTask(c.id, "k", { reserve: 20 }));
    const counts = named(store, ["status", "phase", "points_reserved", "poll_count", "error_json", "output_ref"]);

    const running = await store.tasks.transition(
      t,
      { status: "processing", phase: "submitted", upstreamTaskId: "up-1" },
      opts(null, CONTRACT_NOW + 1),
    );
    expect(running).toMatchObject({ status: "processing", phase: "submitted", pointsReserved: 20 });
    expect(counts()).toMatchObject({ status: 1, phase: 1, points_reserved: 0 });

    // A poll that sees it still running: status, phase, error and output ref as they are.
    const polled = await store.tasks.transition(
      running!,
      { status: "processing", phase: "submitted", pollCount: 1, errorJson: null, outputRef: null },
      opts(null, CONTRACT_NOW + 2),
    );
    expect(polled).toMatchObject({ status: "processing", pollCount: 1, eventSequence: 1 });
    expect(counts()).toEqual({ status: 1, phase: 1, points_reserved: 0, poll_count: 1, error_json: 0, output_ref: 0 });

    // Nothing changes: the row is already what the patch says, and the transition still answers it.
    const again = await store.tasks.transition(
      polled!,
      { status: "processing", pollCount: 1 },
      opts(null, CONTRACT_NOW + 3),
    );
    expect(again).toMatchObject({ status: "processing", pollCount: 1 });
    expect(counts()).toEqual({ status: 1, phase: 1, points_reserved: 0, poll_count: 1, error_json: 0, output_ref: 0 });

    const done = await store.tasks.transition(
      again!,
      { status: "succeeded", phase: "done", pointsCharged: 15, completedAt: CONTRACT_NOW + 4, errorJson: null },
      opts(null, CONTRACT_NOW + 4),
    );
    expect(done).toMatchObject({ status: "succeeded", phase: "done", pointsReserved: 0, pointsCharged: 15 });
    expect(await store.tasks.find(t.id)).toEqual(done);
    expect(counts()).toEqual({ status: 2, phase: 2, points_reserved: 1, poll_count: 1, error_json: 0, output_ref: 0 });
  });

  it("a lease lost before the write still writes nothing, whatever the patch", async () => {
    store = memoryStore();
    const c = await contractClient(store);
    const { task: t } = await store.tasks.create(contractTask(c.id, "k"));
    const [mine] = await store.tasks.claimIds([t.id], "waiting", { now: CONTRACT_NOW, leaseMs: 30_000, token: "w:1" });
    expect(mine).toBeDefined();
    expect(
      await store.tasks.transition(mine!, { status: mine!.status }, opts("w:2", CONTRACT_NOW + 1)),
    ).toBeUndefined();
    expect(await store.tasks.transition(mine!, { status: mine!.status }, opts("w:1", CONTRACT_NOW + 1))).toMatchObject({
      id: t.id,
      claimToken: "w:1",
    });
  });
});

/**
 * Issue #43: a claim of listed tasks (the fair submitter's picks, a list sweep's ids) reaches them by
 * their ids. It walked the (phase, …) index's range instead, every due task of the account or every
 * task of the phase, ahead of a bloom filter of the ids: a cost that grew with the backlog. Checked on
 * SQLite's plan of each claim statement the store prepared.
 */
describe("a claim of listed tasks on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  it("reaches the listed rows by their ids, not through an index range of the phase", async () => {
    store = memoryStore();
    const { sqlite } = store.database;
    const texts = preparedTexts(sqlite);
    const c = await contractClient(store);
    const created = [];
    for (let i = 0; i < 6; i++) created.push((await store.tasks.create(contractTask(c.id, `k${i}`))).task);
    const now = CONTRACT_NOW + 10;
    const fair = await store.tasks.claimFairly("default", { now, leaseMs: 30_000, token: "w:1", limit: 2 });
    expect(fair).toHaveLength(2);
    const listed = await store.tasks.claimIds([created[5]!.id, created[4]!.id], "waiting", {
      now,
      leaseMs: 30_000,
      token: "w:2",
    });
    expect(listed.map((t) => t.id).sort()).toEqual([created[4]!.id, created[5]!.id].sort());

    const claims = [...new Set(texts)].filter(
      (t) => /^update "tasks" set "claimed_until"/.test(t) && /json_each/.test(t),
    );
    expect(claims).toHaveLength(2);
    for (const text of claims) {
      const details = planOf(sqlite, text);
      expect(
        details.filter((d) => /^SEARCH tasks /.test(d)),
        text,
      ).not.toContainEqual(expect.stringMatching(/USING (COVERING )?INDEX tasks_/));
    }
  });
});

/**
 * Retention's prune asks, for each finished task, whether any of its events is still pending. SQLite
 * planned that through events_due_idx (every pending event of every client, for each candidate task)
 * rather than the task's own events (events_task_seq_idx).
 */
describe("pruning finished tasks on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  it("looks up a task's pending events by its id, not among every pending event", async () => {
    store = memoryStore();
    const { sqlite } = store.database;
    const texts = preparedTexts(sqlite);
    const c = await contractClient(store);
    const { task: t } = await store.tasks.create(contractTask(c.id, "k"));
    await store.tasks.transition(
      t,
      { status: "canceled", phase: "done", completedAt: CONTRACT_NOW },
      opts(null, CONTRACT_NOW),
    );
    // Its event is still pending: nothing to prune yet.
    expect(await store.tasks.pruneFinished(CONTRACT_NOW + 1, 100)).toBe(0);

    const [text] = [...new Set(texts)].filter((s) => /NOT EXISTS \(SELECT 1 FROM events e/.test(s));
    expect(text).toBeDefined();
    const details = planOf(sqlite, text!);
    expect(details).toContainEqual(expect.stringMatching(/^SEARCH e USING (COVERING )?INDEX events_task_seq_idx/));
    expect(details).not.toContainEqual(expect.stringMatching(/events_due_idx/));
  });
});

/**
 * A submission's step reads its task once: beginSubmission reads the row under the caller's lease,
 * decides, and its transition starts from that row (the same transaction), where it read it again.
 */
describe("a submission's step and the transitions after it on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  it("reads the task's row once, and the transition still starts from the row as stored", async () => {
    store = memoryStore();
    const reads = taskReads(store.database.sqlite);
    const c = await contractClient(store);
    const { task: t } = await store.tasks.create(contractTask(c.id, "k", { reserve: 20 }));
    const [mine] = await store.tasks.claimIds([t.id], "waiting", { now: CONTRACT_NOW, leaseMs: 30_000, token: "w:1" });
    reads.n = 0;
    const step = await store.tasks.beginSubmission(
      t.id,
      "w:1",
      () => ({ kind: "go", transition: true, patch: { submitAttempts: mine!.submitAttempts + 1, pointsReserved: 25 } }),
      opts("w:1", CONTRACT_NOW + 1),
    );
    expect(step).toMatchObject({ kind: "go", task: { submitAttempts: 1, pointsReserved: 25, claimToken: "w:1" } });
    expect(reads.n).toBe(1);
    expect(await store.tasks.find(t.id)).toEqual(step!.task);
    expect(await store.clients.creditPosition(c.id)).toMatchObject({ reserved: 25 });
  });

  // A submission's record and a poll's observation start from the row their lease claimed or last
  // wrote (TransitionOptions.asLeased): no read of it again, the write still guarded by the lease.
  it("reads no row, writes what a read would have, and writes nothing once the lease is lost", async () => {
    store = memoryStore();
    const reads = taskReads(store.database.sqlite);
    const c = await contractClient(store);
    const { task: t } = await store.tasks.create(contractTask(c.id, "k"));
    const lease = { leaseMs: 30_000, token: "w:1" };
    const [mine] = await store.tasks.claimIds([t.id], "waiting", { now: CONTRACT_NOW, ...lease });
    reads.n = 0;
    const patch = { phase: "submitted" as const, upstreamTaskId: "up-1", submittedAt: CONTRACT_NOW + 1 };
    const after = await store.tasks.transition(mine!, patch, { ...opts("w:1", CONTRACT_NOW + 1), asLeased: true });
    expect(reads.n).toBe(0);
    expect(after).toMatchObject({ ...patch, claimToken: "w:1" });
    expect(await store.tasks.find(t.id)).toEqual(after);

    // Taken over after the lease ran out: the first holder's change applies nowhere.
    const later = CONTRACT_NOW + 60_000;
    const [theirs] = await store.tasks.claimIds([t.id], "submitted", { now: later, leaseMs: 30_000, token: "w:2" });
    expect(theirs).toMatchObject({ claimToken: "w:2" });
    const lost = { status: "processing" as const, updatedAt: later };
    expect(await store.tasks.transition(after!, lost, { ...opts("w:1", later), asLeased: true })).toBeUndefined();
    expect(await store.tasks.find(t.id)).toEqual(theirs);
  });
});

/** Counts the runs of the store's task read by id (findTaskPrepared) from now on. */
const taskReads = (sqlite: Connection) => reads(sqlite, /^SELECT "id", .* FROM tasks WHERE id = \?$/);

/** Counts the `get`s of the statements prepared from now on whose text matches `text`. */
function reads(sqlite: Connection, text: RegExp): { n: number } {
  const counted = { n: 0 };
  const prepare = sqlite.prepare.bind(sqlite);
  sqlite.prepare = ((source: string) => {
    const stmt = prepare(source);
    if (text.test(source)) {
      const get = stmt.get.bind(stmt);
      stmt.get = ((...args: unknown[]) => {
        counted.n++;
        return get(...args);
      }) as typeof stmt.get;
    }
    return stmt;
  }) as typeof sqlite.prepare;
  return counted;
}

/**
 * Issue #43: every creation's answer reads its model's duration samples for its estimate; on SQLite,
 * as on PostgreSQL (pg-intake-wake.test.ts), one read answers the creations of the next
 * SAMPLES_FRESH_MS, and a save of this store's is read at once.
 */
describe("a creation's estimate on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  it("shares one read of a model's samples among the creations that follow; a save here is read at once", async () => {
    store = memoryStore();
    const samples = reads(store.database.sqlite, /^SELECT samples_json FROM duration_stats/);
    await store.accounts.saveDurationSamples("image", "m-1", [4_000, 6_000], CONTRACT_NOW);
    const got = await Promise.all(Array.from({ length: 5 }, () => store!.accounts.durationSamples("image", "m-1")));
    expect(got).toEqual(Array(5).fill([4_000, 6_000]));
    expect(await store.accounts.durationSamples("image", "m-2")).toEqual([]);
    expect(samples.n).toBe(2);
    // Each caller gets an array of its own (DurationStats adds to the one it gets).
    expect(got[0]).not.toBe(got[1]);
    await store.accounts.saveDurationSamples("image", "m-1", [5_000], CONTRACT_NOW);
    expect(await store.accounts.durationSamples("image", "m-1")).toEqual([5_000]);
    expect(samples.n).toBe(3);
  });
});

/**
 * A first charge teaches its price key's price (learned_prices). A model's completions all teach the
 * same price: the row is written only when the price changes, as on PostgreSQL (pg-credits.test.ts).
 */
describe("a learned price on SQLite", () => {
  let store: SqliteStore | undefined;
  afterEach(() => store?.database.close());

  it("is written when it changes, not when a completion teaches the price it holds", async () => {
    store = memoryStore();
    const s = store;
    const c = await contractClient(s);
    const complete = async (key: string, charged: number, at: number) => {
      const req = contractTask(c.id, key);
      const { task } = await s.tasks.create({ ...req, row: { ...req.row, priceKey: "pk-same" } });
      await s.tasks.transition(
        task,
        { status: "succeeded", phase: "done", pointsCharged: charged, completedAt: at },
        opts(null, at),
      );
    };
    const learned = () =>
      s.database.sqlite.prepare("SELECT points, updated_at FROM learned_prices WHERE price_key = 'pk-same'").get();
    await complete("first", 12, CONTRACT_NOW + 1);
    expect(learned()).toEqual({ points: 12, updated_at: CONTRACT_NOW + 1 });
    await complete("second", 12, CONTRACT_NOW + 2);
    expect(learned()).toEqual({ points: 12, updated_at: CONTRACT_NOW + 1 });
    await complete("third", 14, CONTRACT_NOW + 3);
    expect(learned()).toEqual({ points: 14, updated_at: CONTRACT_NOW + 3 });
    // The price a submission reads is the last one taught.
    expect(findLearnedPrice(s.database.db, "pk-same")).toBe(14);
  });
});

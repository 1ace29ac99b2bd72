import { describe, expect, it, vi } from "vitest";
import type { SqliteStore } from "../../src/db/sqlite/store.js";
import type { NewTaskRequest, Store } from "../../src/store/store.js";
import { client, conformance, fresh, NOW, opts, task } from "../helpers/conformance.js";

/**
 * Stored bytes per client (docs/contract.md, "Bounded requests"; issue #30 item 13), on both drivers: intake adds a task's
 * stored_bytes to its client's row in the creation's own transaction or statement, the bound holds
 * exactly under a burst of concurrent creations (on PostgreSQL through the batched path and the
 * per-request one), a replay adds nothing and retention takes pruned tasks off (with their events:
 * store-conformance-stored-bytes.test.ts counts everything written for a client). And list reads that
 * leave a large output in the database (outputMaxBytes).
 */
const suite = conformance();

class OverBound extends Error {}

/**
 * A creation of `bytes` stored bytes under a bound of `limit`; `batched`: a creation with no cap or
 * credit limit (on PostgreSQL it joins the group-committed multi-row INSERT), else the per-request path.
 */
function sized(clientId: string, key: string, bytes: number, limit: number | null, batched: boolean): NewTaskRequest {
  const req = task(clientId, key);
  return {
    ...req,
    row: { ...req.row, callbackUrl: null, storedBytes: bytes },
    needs: { waiting: !batched, credit: false },
    storedBytesLimit: limit,
    admit: (ctx) => {
      if (limit !== null && (ctx.storedBytes ?? 0) + bytes > limit) throw new OverBound();
      return 0;
    },
  };
}

async function storedOfRows(store: Store, clientId: string): Promise<number> {
  return (await store.tasks.list({ clientId, limit: 1000 })).reduce((sum, t) => sum + t.storedBytes, 0);
}

describe.each(suite.dialects)("TaskStore stored bytes on %s", (_name, h) => {
  it.each([
    ["batched", true],
    ["per request", false],
  ] as const)(
    "create (%s) adds each task's stored bytes to its client's; a replay adds nothing",
    async (_path, batched) => {
      const store = await h.shared();
      const c = await client(store);
      const other = await client(store);
      expect(await store.tasks.storedBytesOfClient(c.id)).toBe(0);
      await Promise.all([
        store.tasks.create(sized(c.id, "a", 1_000, null, batched)),
        store.tasks.create(sized(c.id, "b", 2_345, null, batched)),
        store.tasks.create(sized(other.id, "c", 7, null, batched)),
      ]);
      const replay = await store.tasks.create(sized(c.id, "a", 1_000, null, batched));
      expect(replay.replayed).toBe(true);
      expect(await store.tasks.storedBytesOfClient(c.id)).toBe(3_345);
      expect(await store.tasks.storedBytesOfClient(other.id)).toBe(7);
      expect(await storedOfRows(store, c.id)).toBe(3_345);
    },
  );

  it.each([
    ["batched", true],
    ["per request", false],
  ] as const)(
    "a burst of 40 concurrent creations (%s) against a bound of 10 tasks' bytes creates exactly 10",
    async (_path, batched) => {
      const store = await h.shared();
      const c = await client(store);
      // A task stored before the burst: the bound counts it.
      await store.tasks.create(sized(c.id, fresh("before"), 500, null, batched));
      const limit = 500 + 10 * 1_000;
      const results = await Promise.allSettled(
        Array.from({ length: 40 }, (_, i) => store.tasks.create(sized(c.id, `burst-${i}`, 1_000, limit, batched))),
      );
      const created = results.filter((r) => r.status === "fulfilled");
      const refused = results.filter((r) => r.status === "rejected");
      expect(created).toHaveLength(10);
      for (const r of refused) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(OverBound);
      expect(await store.tasks.storedBytesOfClient(c.id)).toBe(limit);
      expect(await storedOfRows(store, c.id)).toBe(limit);
    },
  );

  it("a batch that passes one client's bound leaves the other clients of the batch created", async () => {
    const store = await h.shared();
    const full = await client(store);
    const room = await client(store);
    await store.tasks.create(sized(full.id, fresh("fill"), 900, null, true));
    const results = await Promise.allSettled([
      store.tasks.create(sized(full.id, fresh("x"), 200, 1_000, true)),
      ...Array.from({ length: 5 }, (_, i) => store.tasks.create(sized(room.id, `r-${i}`, 100, 1_000, true))),
    ]);
    expect(results.map((r) => r.status)).toEqual([
      "rejected",
      "fulfilled",
      "fulfilled",
      "fulfilled",
      "fulfilled",
      "fulfilled",
    ]);
    expect(await store.tasks.storedBytesOfClient(full.id)).toBe(900);
    expect(await store.tasks.storedBytesOfClient(room.id)).toBe(500);
  });

  it("pruneFinished takes the pruned tasks' bytes off their clients'", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const ended = [];
    for (let i = 0; i < 3; i++) {
      const { task: t } = await store.tasks.create(sized(c.id, `p-${i}`, 100 * (i + 1), null, true));
      ended.push(t);
    }
    await store.tasks.transition(ended[0]!, { status: "succeeded", phase: "done", completedAt: NOW }, opts());
    await store.tasks.transition(ended[1]!, { status: "failed", phase: "done", completedAt: NOW }, opts());
    // Their events count too (the pull feed's rows: no callback, so only the body).
    let eventBytes = 0;
    for (const t of ended.slice(0, 2))
      for (const e of await store.events.ofTask(t.id)) eventBytes += Buffer.byteLength(e.payload);
    expect(eventBytes).toBeGreaterThan(0);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(600 + eventBytes);
    expect(await store.tasks.pruneFinished(NOW + 1, 10)).toBe(2);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(300);
    expect(await storedOfRows(store, c.id)).toBe(300);
  });

  it("list with outputMaxBytes leaves a larger output in the database: outputJson null, outputOmitted true", async () => {
    const store = await h.shared();
    const c = await client(store);
    const big = JSON.stringify({ text: "漢".repeat(400) }); // 1,200 bytes of UTF-8 in 412 characters
    const small = JSON.stringify({ text: "x".repeat(400) });
    for (const [key, output] of [
      ["big", big],
      ["small", small],
    ] as const) {
      const { task: t } = await store.tasks.create(sized(c.id, key, 0, null, false));
      await store.tasks.transition(
        t,
        { status: "succeeded", phase: "done", outputJson: output, completedAt: NOW },
        opts(),
      );
    }
    const listed = await store.tasks.list({ clientId: c.id, limit: 10, outputMaxBytes: 1_000 });
    const byOutput = Object.fromEntries(
      listed.map((t) => [t.idempotencyKey, { outputJson: t.outputJson, outputOmitted: t.outputOmitted }]),
    );
    expect(byOutput).toEqual({
      big: { outputJson: null, outputOmitted: true },
      small: { outputJson: small, outputOmitted: false },
    });
    // Without the bound, the list reads outputs as they are.
    expect((await store.tasks.list({ clientId: c.id, limit: 10 })).map((t) => t.outputJson).sort()).toEqual(
      [big, small].sort(),
    );
  });
});

describe("SQLite intake writes a client's stored bytes once per commit (issue #43)", () => {
  const [, sqlite] = suite.dialects.find(([name]) => name === "sqlite")!;

  it("a burst of two clients' 30 creations in one commit: one write of client_storage per client, each with the burst's sum, the bound exact", async () => {
    const { store } = await sqlite.fresh();
    const db = (store as SqliteStore).database.sqlite;
    const a = await client(store);
    const b = await client(store);
    await store.tasks.create(sized(a.id, fresh("before"), 500, null, true));
    // Every write of client_storage (the upsert's insert or update), counted by SQLite itself.
    db.exec(`CREATE TEMP TABLE storage_writes (client_id TEXT, stored_bytes INTEGER);
      CREATE TEMP TRIGGER storage_inserted AFTER INSERT ON main.client_storage
        BEGIN INSERT INTO storage_writes VALUES (new.client_id, new.stored_bytes); END;
      CREATE TEMP TRIGGER storage_updated AFTER UPDATE ON main.client_storage
        BEGIN INSERT INTO storage_writes VALUES (new.client_id, new.stored_bytes); END;`);
    try {
      const limit = 500 + 10 * 1_000;
      // The group commit's clock stands still during the burst, so no turn budget cuts the batch
      // on a busy machine: the 30 units are one commit.
      const now = performance.now();
      const clock = vi.spyOn(performance, "now").mockReturnValue(now);
      const results = await Promise.allSettled([
        ...Array.from({ length: 25 }, (_, i) => store.tasks.create(sized(a.id, `a-${i}`, 1_000, limit, true))),
        ...Array.from({ length: 5 }, (_, i) => store.tasks.create(sized(b.id, `b-${i}`, 7, null, true))),
      ]).finally(() => clock.mockRestore());
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(15);
      expect(
        db.prepare("SELECT client_id, stored_bytes FROM storage_writes ORDER BY stored_bytes").raw().all(),
      ).toEqual([
        [b.id, 35],
        [a.id, limit],
      ]);
      expect(await store.tasks.storedBytesOfClient(a.id)).toBe(limit);
      expect(await storedOfRows(store, a.id)).toBe(limit);
      expect(await store.tasks.storedBytesOfClient(b.id)).toBe(35);
    } finally {
      db.exec("DROP TRIGGER temp.storage_inserted; DROP TRIGGER temp.storage_updated; DROP TABLE temp.storage_writes");
    }
  });
});

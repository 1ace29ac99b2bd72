import Database from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { memoryStore } from "../helpers/memory-store.js";

const NOW = 1_800_000_000_000;
const MINUTE = 60_000;

/**
 * Issue #38 item 7: a statement over many rows on the main thread. The read budget's window can hold a
 * minute of reads (100,000 with a large budget); takeRead used to read every one of them into JS to
 * count them (25-35 ms of one turn in bench/big-outputs.mjs). It counts in SQLite, bounded by the limit.
 */
describe("takeRead on SQLite", () => {
  afterEach(() => vi.restoreAllMocks());

  /** Rows better-sqlite3 hands to JS from every statement prepared from now on (all/get). */
  function rowsToJs(): { count: number } {
    const seen = { count: 0 };
    const probe = new Database(":memory:");
    const proto = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, (...a: unknown[]) => unknown>;
    probe.close();
    const all = proto.all!;
    const get = proto.get!;
    vi.spyOn(proto, "all").mockImplementation(function (this: unknown, ...args: unknown[]) {
      const rows = all.apply(this, args) as unknown[];
      seen.count += rows.length;
      return rows;
    });
    vi.spyOn(proto, "get").mockImplementation(function (this: unknown, ...args: unknown[]) {
      const row = get.apply(this, args);
      if (row !== undefined) seen.count++;
      return row;
    });
    return seen;
  }

  it("hands SQLite's count to JS, not the window's reads, however many it holds", async () => {
    // Before the store opens: the driver wraps each statement's methods when it is prepared.
    const seen = rowsToJs();
    const store = memoryStore();
    try {
      for (let i = 0; i < 3_000; i++) await store.accounts.takeRead("acct", NOW + i, 100_000, MINUTE);
      seen.count = 0;
      expect(await store.accounts.takeRead("acct", NOW + 3_000, 100_000, MINUTE)).toBe(true);
      expect(seen.count).toBe(1);
      // The bound still holds at the limit, counted the same way.
      expect(await store.accounts.takeRead("acct", NOW + 3_001, 3_001, MINUTE)).toBe(false);
      expect(await store.accounts.takeRead("acct", NOW + 3_001, 3_002, MINUTE)).toBe(true);
      expect(await store.accounts.takeRead("acct", NOW + MINUTE + 1_000, 3_001, MINUTE)).toBe(true);
      expect(seen.count).toBe(4);
    } finally {
      await store.close();
    }
  });

  it("takes made in one turn share one commit, each counting the takes queued before it", async () => {
    const store = memoryStore();
    try {
      const transactions = vi.spyOn(store.database.db, "transaction");
      // The turn's clock stands still: a flush past its floor of 4 units stops when the turn's budget
      // is spent (group-commit.test.ts tests that cut), and on a busy machine a preemption between two
      // takes could spend it. What this test pins is the batching, so no wall time passes.
      const frozen = performance.now();
      vi.spyOn(performance, "now").mockReturnValue(frozen);
      // A sweep's reads: one transaction and one WAL sync for all, not one each on the main thread.
      const takes = [0, 1, 2, 3, 4].map((i) => store.accounts.takeRead("acct", NOW + i, 3, MINUTE));
      expect(await Promise.all(takes)).toEqual([true, true, true, false, false]);
      expect(transactions).toHaveBeenCalledTimes(1);
      expect(await store.accounts.readsSince("acct", 0)).toEqual([NOW, NOW + 1, NOW + 2]);
    } finally {
      await store.close();
    }
  });

  it("pruning a window of thousands of reads deletes them a chunk per commit, not in one turn", async () => {
    const store = memoryStore();
    try {
      const insert = store.database.sqlite.prepare("INSERT INTO upstream_reads (account, at) VALUES (?, ?)");
      store.database.sqlite.transaction(() => {
        for (let i = 0; i < 5_000; i++) insert.run("acct", NOW + i);
        insert.run("other", NOW);
      })();
      const transactions = vi.spyOn(store.database.db, "transaction");
      await store.accounts.pruneReads("acct", NOW + 4_500);
      // 2,000 + 2,000 + 500: three commits, the last short, and nothing else touched.
      expect(transactions).toHaveBeenCalledTimes(3);
      expect(await store.accounts.readsSince("acct", 0)).toEqual(
        Array.from({ length: 500 }, (_, i) => NOW + 4_500 + i),
      );
      expect(await store.accounts.readsSince("other", 0)).toEqual([NOW]);
    } finally {
      await store.close();
    }
  });
});

import { sql } from "drizzle-orm";
import { existsSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type Gatherer, GroupCommit, StoreClosedError } from "../../src/db/sqlite/group-commit.js";
import { TurnTime } from "../../src/next-turn.js";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { FakeClock } from "../helpers/fake-clock.js";

describe("GroupCommit", () => {
  let dir: string;
  let database: Database_;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "genrelay-gc-"));
    database = openDatabase(join(dir, "db.sqlite"));
    database.sqlite.exec("CREATE TABLE items (v TEXT NOT NULL UNIQUE)");
  });
  afterEach(() => {
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const count = () => (database.sqlite.prepare("SELECT count(*) AS n FROM items").get() as { n: number }).n;

  /** SQLite's temp files this process has open (unlinked at once, so seen only through its descriptors). */
  const tempFiles = () =>
    readdirSync("/proc/self/fd").flatMap((fd) => {
      try {
        const target = readlinkSync(`/proc/self/fd/${fd}`);
        return target.includes("etilqs_") ? [target] : [];
      } catch {
        return [];
      }
    });

  it.runIf(existsSync("/proc/self/fd"))(
    "a unit's savepoint journal stays in memory: no temp file, however many pages the unit changes",
    async () => {
      // Pages committed before the unit: its savepoint journals each one it changes, and past 64 KiB
      // of them SQLite spilled that journal to a file of its temp directory (temp_store = MEMORY).
      database.sqlite.exec("CREATE TABLE pages (k INTEGER PRIMARY KEY, v TEXT NOT NULL)");
      const insert = database.sqlite.prepare("INSERT INTO pages (k, v) VALUES (?, ?)");
      database.sqlite.transaction(() => {
        for (let k = 0; k < 200; k++) insert.run(k, "x".repeat(2000));
      })();
      const commits = new GroupCommit(database.db);
      let open: string[] | null = null;
      await commits.run(() => {
        database.sqlite.prepare("UPDATE pages SET v = ?").run("y".repeat(2000));
        open = tempFiles();
      });
      expect(open).toEqual([]);
      expect(database.sqlite.prepare("SELECT count(*) AS n FROM pages WHERE v LIKE 'y%'").get()).toEqual({ n: 200 });
    },
  );

  it("close() commits the work already queued, then refuses more without touching the database", async () => {
    const commits = new GroupCommit(database.db);
    const queued = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('queued')`));
    commits.close();
    // Committed by close() itself: the database can close now and the queued write is not lost.
    expect(count()).toBe(1);
    await expect(queued).resolves.toBeDefined();
    database.close();
    await expect(commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('late')`))).rejects.toBeInstanceOf(
      StoreClosedError,
    );
  });

  it("settles at most settlesPerTurn units a turn: their callers' continuations do not all run in one turn", async () => {
    // A clock that stands still: only the count bounds the turn, not the real clock of a busy machine.
    const clock = new FakeClock();
    const commits = new GroupCommit(database.db, 256, 0, 0, { settlesPerTurn: 4, now: () => clock.now() });
    const settled: number[] = [];
    let settledATurnLater = -1;
    const units = Array.from({ length: 10 }, (_, i) =>
      commits
        .run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${String(i)})`))
        .then(() => {
          if (i === 0)
            setImmediate(() => {
              settledATurnLater = settled.length;
            });
          settled.push(i);
        }),
    );
    await Promise.all(units);
    // One commit of 10 units, settled 4 a turn: in the turn after the first, only those 4 had (10 all
    // at once before).
    expect(count()).toBe(10);
    expect(settledATurnLater).toBe(4);
    expect(settled).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it("settles for settleBudgetMs a turn: each unit's continuation runs, and is timed, before the next settles", async () => {
    const clock = new FakeClock();
    const commits = new GroupCommit(database.db, 256, 0, 0, { settleBudgetMs: 5, now: () => clock.now() });
    const turns: number[][] = [[]];
    let turn = 0;
    const units = Array.from({ length: 6 }, (_, i) =>
      commits
        .run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${String(i)})`))
        .then(() => {
          // The caller's next step: 3 ms of answering on the turn's clock.
          if (i === 0) {
            const mark = () => {
              turns[++turn] = [];
              if (turn < 6) setImmediate(mark);
            };
            setImmediate(mark);
          }
          turns[turn]!.push(i);
          clock.advance(3);
        }),
    );
    await Promise.all(units);
    // 3 ms each against a 5 ms budget: two continuations a turn (the second crosses it), never all six.
    expect(turns.filter((t) => t.length > 0)).toEqual([
      [0, 1],
      [2, 3],
      [4, 5],
    ]);
  });

  it("runs work queued in one turn in a single transaction, and settles only after the commit", async () => {
    const commits = new GroupCommit(database.db);
    const seenInside: number[] = [];
    const promises = ["a", "b", "c"].map((v) =>
      commits.run((tx) => {
        tx.run(sql`INSERT INTO items (v) VALUES (${v})`);
        seenInside.push(count());
        return v.toUpperCase();
      }),
    );
    // Nothing has run yet: the batch waits for the end of this turn.
    expect(count()).toBe(0);
    expect(await Promise.all(promises)).toEqual(["A", "B", "C"]);
    expect(seenInside).toEqual([1, 2, 3]);
    expect(count()).toBe(3);
  });

  it("fillTurns: a batch waits a turn while rows keep arriving, at most fillTurns turns, then commits once", async () => {
    const commits = new GroupCommit(database.db, 256, 2);
    const transactions = vi.spyOn(database.db, "transaction");
    const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
    const insert = (v: string) => commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${v})`));
    // A row in each of 4 turns: the first batch takes the rows of turns 0-2 (it waited 2 turns), the
    // fourth row its own batch.
    const written = [insert("t0")];
    for (const v of ["t1", "t2", "t3"]) {
      await nextTurn();
      written.push(insert(v));
    }
    await Promise.all(written);
    expect(transactions).toHaveBeenCalledTimes(2);
    expect(count()).toBe(4);
    // Nothing more arriving: a lone row waits one turn (to see whether more come) and commits.
    transactions.mockClear();
    const lone = insert("lone");
    await nextTurn();
    expect(count()).toBe(4);
    await nextTurn();
    await lone;
    expect(count()).toBe(5);
    expect(transactions).toHaveBeenCalledTimes(1);
  });

  it("holdMs: a batch waits for announced writes and commits once as the last is queued, with what joins it as it closes", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 60_000);
    const transactions = vi.spyOn(database.db, "transaction");
    const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
    const insert = (v: string) => commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${v})`));
    // Nothing open: nothing to join.
    expect(commits.beforeCommit(() => {})).toBe(false);
    const [a, b] = [commits.expect(), commits.expect()];
    a();
    const written = [insert("a")];
    const joined: Promise<unknown>[] = [];
    expect(commits.beforeCommit(() => joined.push(insert("claim")))).toBe(true);
    for (let i = 0; i < 5; i++) await nextTurn();
    // b is still on the wire: the batch waits (up to an hour here), nothing is written.
    expect(count()).toBe(0);
    b();
    b(); // idempotent: the count is not taken down twice
    written.push(insert("b"));
    await Promise.all([...written, ...joined]);
    expect(database.sqlite.prepare("SELECT v FROM items ORDER BY rowid").all()).toEqual([
      { v: "a" },
      { v: "b" },
      { v: "claim" },
    ]);
    expect(transactions).toHaveBeenCalledTimes(1);
    // With nothing announced, a lone write commits at the end of its turn.
    const lone = insert("lone");
    await nextTurn();
    await lone;
    expect(transactions).toHaveBeenCalledTimes(2);
  });

  it("holdMs bounds the wait: an announced write that never comes holds a batch at most that long", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 30);
    commits.expect();
    const started = performance.now();
    await commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('x')`));
    expect(performance.now() - started).toBeGreaterThanOrEqual(29);
    expect(count()).toBe(1);
  });

  it("lingerMs: lingering units wait while they keep coming, past holdMs; a unit without linger, a join or closeSoon ends the wait", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 40, { lingerMs: 60_000 });
    const transactions = vi.spyOn(database.db, "transaction");
    const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
    const waitMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const insert = (v: string, linger: boolean) =>
      commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${v})`), { linger });
    commits.expect(); // on the wire for the whole test
    // Each record within holdMs (40) of the one before: the batch waits on, past holdMs from its first.
    const records = [insert("r1", true)];
    await waitMs(25);
    records.push(insert("r2", true));
    commits.lingerOn();
    await waitMs(25);
    expect(count()).toBe(0);
    // A claim: the batch is older than holdMs, so it commits at the next turn, the records with it.
    await insert("claim", false);
    await Promise.all(records);
    expect(count()).toBe(3);
    expect(transactions).toHaveBeenCalledTimes(1);
    // A lone record: committed holdMs after it, the announced write still out.
    await insert("lone", true);
    expect(count()).toBe(4);
    expect(transactions).toHaveBeenCalledTimes(2);
    // closeSoon: a lingering batch commits at the next turn.
    const r3 = insert("r3", true);
    await nextTurn();
    commits.closeSoon();
    await r3;
    expect(transactions).toHaveBeenCalledTimes(3);
    // A claim joining as the batch closes (a key's refill) ends the wait as a claim queued into it does.
    const r4 = insert("r4", true);
    await waitMs(25);
    commits.lingerOn();
    await waitMs(25);
    const joined: Promise<unknown>[] = [];
    expect(commits.beforeCommit(() => joined.push(insert("refill", false)))).toBe(true);
    await r4;
    await Promise.all(joined);
    expect(count()).toBe(7);
    expect(transactions).toHaveBeenCalledTimes(4);
  });

  it("beforeCommit with linger: what joins waits out the records' linger, until hurry() ends it", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 20, { lingerMs: 60_000 });
    const transactions = vi.spyOn(database.db, "transaction");
    const waitMs = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const insert = (v: string, linger: boolean) =>
      commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${v})`), { linger });
    commits.expect(); // on the wire for the whole test
    // Records of a burst, then one more well past holdMs (20) after the last: still one commit.
    const records = [insert("r1", true), insert("r2", true)];
    commits.lingerOn();
    await waitMs(60);
    records.push(insert("r3", true));
    // A refill that may wait (its keys still have events to start) joins without ending the linger.
    const joined: Promise<unknown>[] = [];
    expect(commits.beforeCommit(() => joined.push(insert("refill", true)), { linger: true })).toBe(true);
    await waitMs(60);
    expect(count()).toBe(0);
    // Its keys ran out: the batch commits at once (it is older than a hold), the refill in it.
    commits.hurry();
    await Promise.all(records);
    await Promise.all(joined);
    expect(database.sqlite.prepare("SELECT v FROM items ORDER BY rowid").all()).toEqual([
      { v: "r1" },
      { v: "r2" },
      { v: "r3" },
      { v: "refill" },
    ]);
    expect(transactions).toHaveBeenCalledTimes(1);
    // No batch open: hurry() does nothing, and nothing is left to join.
    commits.hurry();
    expect(commits.beforeCommit(() => {}, { linger: true })).toBe(false);
  });

  it("a unit that throws is rolled back and rejected alone; the others commit", async () => {
    const commits = new GroupCommit(database.db);
    const ok1 = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('x')`));
    const dup = commits.run((tx) => {
      tx.run(sql`INSERT INTO items (v) VALUES ('y')`);
      tx.run(sql`INSERT INTO items (v) VALUES ('x')`); // UNIQUE violation: this unit's 'y' must go too
    });
    const ok2 = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('z')`));
    await expect(dup).rejects.toThrow(/INSERT INTO items/);
    await ok1;
    await ok2;
    expect(database.sqlite.prepare("SELECT v FROM items ORDER BY v").all()).toEqual([{ v: "x" }, { v: "z" }]);
  });

  it("runAtomic runs a unit without a savepoint: one failing statement rejects alone, the batch commits", async () => {
    const commits = new GroupCommit(database.db);
    const savepoints: string[] = [];
    const spy = database.sqlite.prepare.bind(database.sqlite);
    database.sqlite.prepare = ((source: string) => {
      if (/savepoint/i.test(source)) savepoints.push(source);
      return spy(source);
    }) as typeof database.sqlite.prepare;
    const ok = commits.runAtomic((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('p')`));
    const dup = commits.runAtomic((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('p')`));
    const plain = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('q')`));
    await ok;
    await expect(dup).rejects.toThrow(/INSERT INTO items/);
    await plain;
    expect(database.sqlite.prepare("SELECT v FROM items ORDER BY v").all()).toEqual([{ v: "p" }, { v: "q" }]);
    // Only the run() unit took a savepoint (its SAVEPOINT and RELEASE).
    expect(savepoints.filter((s) => /^savepoint/i.test(s))).toHaveLength(1);
  });

  it("rejects the whole batch when the commit itself fails", async () => {
    const commits = new GroupCommit(database.db);
    database.sqlite.pragma("query_only = ON");
    const a = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('a')`));
    await expect(a).rejects.toThrow();
    database.sqlite.pragma("query_only = OFF");
    expect(count()).toBe(0);
  });

  it("when one unit's error rolls back the whole transaction, every unit of the batch is rejected", async () => {
    const commits = new GroupCommit(database.db);
    const first = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('kept?')`));
    const fatal = commits.run(() => {
      // What SQLite does on disk full or an I/O error: the whole transaction is gone.
      database.sqlite.exec("ROLLBACK");
      throw new Error("disk I/O error");
    });
    const later = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('later')`));
    await expect(first).rejects.toThrow();
    await expect(fatal).rejects.toThrow();
    await expect(later).rejects.toThrow();
    expect(count()).toBe(0);
  });

  describe("gathered: what a transaction's units add up is written once, before its COMMIT", () => {
    /** Each unit adds its value to the transaction's tally; the seal writes the sum as one row. */
    const sums: Gatherer<{ sum: string[] }> = {
      open: () => ({ sum: [] }),
      seal: (tx, tally) => void tx.run(sql`INSERT INTO items (v) VALUES (${`sum:${tally.sum.join("+")}`})`),
    };
    const rows = () => database.sqlite.prepare("SELECT v FROM items ORDER BY rowid").pluck().all();

    it("units of one transaction share one tally, sealed once inside the transaction after the last unit", async () => {
      const commits = new GroupCommit(database.db);
      const transactions = vi.spyOn(database.db, "transaction");
      const units = ["a", "b", "c"].map((v) =>
        commits.runAtomic((tx) => {
          tx.run(sql`INSERT INTO items (v) VALUES (${v})`);
          commits.gathered(sums).sum.push(v);
          return v;
        }),
      );
      expect(await Promise.all(units)).toEqual(["a", "b", "c"]);
      expect(rows()).toEqual(["a", "b", "c", "sum:a+b+c"]);
      expect(transactions).toHaveBeenCalledTimes(1);
      // Outside a unit there is no open transaction to gather into.
      expect(() => commits.gathered(sums)).toThrow("GroupCommit.gathered: called outside a unit of this commit");
    });

    it("a flush cut by its budget seals each part in its own commit", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      const units = ["a", "b", "c"].map((v) =>
        commits.run((tx) => {
          tx.run(sql`INSERT INTO items (v) VALUES (${v})`);
          commits.gathered(sums).sum.push(v);
          clock.advance(6);
          return v;
        }),
      );
      expect(await Promise.all(units)).toEqual(["a", "b", "c"]);
      expect(rows()).toEqual(["a", "b", "sum:a+b", "c", "sum:c"]);
    });

    it("a transaction that fails drops its tally: the next one starts afresh", async () => {
      const commits = new GroupCommit(database.db);
      const first = commits.run((tx) => {
        tx.run(sql`INSERT INTO items (v) VALUES ('lost')`);
        commits.gathered(sums).sum.push("lost");
      });
      const fatal = commits.run(() => {
        database.sqlite.exec("ROLLBACK");
        throw new Error("disk I/O error");
      });
      await expect(first).rejects.toThrow();
      await expect(fatal).rejects.toThrow();
      const next = commits.run((tx) => {
        tx.run(sql`INSERT INTO items (v) VALUES ('kept')`);
        commits.gathered(sums).sum.push("kept");
      });
      await next;
      expect(rows()).toEqual(["kept", "sum:kept"]);
    });

    it("a seal that throws fails the whole batch: nothing of it is committed", async () => {
      const commits = new GroupCommit(database.db);
      const failing: Gatherer<null> = {
        open: () => null,
        seal: () => {
          throw new Error("seal failed");
        },
      };
      const unit = commits.run((tx) => {
        tx.run(sql`INSERT INTO items (v) VALUES ('a')`);
        commits.gathered(failing);
      });
      await expect(unit).rejects.toThrow("seal failed");
      expect(rows()).toEqual([]);
    });
  });

  describe("the work of one turn is bounded (issue #38 item 7)", () => {
    const rows = () => database.sqlite.prepare("SELECT v FROM items ORDER BY rowid").pluck().all();
    /** A unit that writes `v` and costs `ms` on the fake clock. */
    const costly =
      (clock: FakeClock, v: string, ms: number) => (tx: Parameters<Parameters<GroupCommit["run"]>[0]>[0]) => {
        tx.run(sql`INSERT INTO items (v) VALUES (${v})`);
        clock.advance(ms);
        return v;
      };

    it("a flush over its budget commits what ran, yields the turn, then commits the rest first, in order", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      const transactions = vi.spyOn(database.db, "transaction");
      // What another request does between the two commits (a macrotask queued while the first runs).
      let seenBetween: unknown[] | undefined;
      const first = commits.run((tx) => {
        setImmediate(() => {
          seenBetween = rows();
        });
        return costly(clock, "a", 4)(tx);
      });
      const rest = ["b", "c", "d", "e"].map((v) => commits.run(costly(clock, v, 4)));
      let late: Promise<unknown> | undefined;
      const settled: string[] = [];
      for (const [i, p] of [first, ...rest].entries()) void p.then(() => settled.push(`${i}:${rows().length}`));
      // Queued once the first part has committed: it must come after the part left over.
      void first.then(() => {
        late = commits.run(costly(clock, "late", 0));
      });
      expect(await Promise.all([first, ...rest])).toEqual(["a", "b", "c", "d", "e"]);
      await late;
      // 4 ms a unit, 10 ms a turn: a, b and c ran (12 ms), then the rest and what came meanwhile, in one commit.
      expect(seenBetween).toEqual(["a", "b", "c"]);
      expect(transactions).toHaveBeenCalledTimes(2);
      expect(rows()).toEqual(["a", "b", "c", "d", "e", "late"]);
      // Each unit settled only after the commit that holds it.
      expect(settled).toEqual(["0:3", "1:3", "2:3", "3:6", "4:6"]);
    });

    it("two commits sharing a turn's clock: the second yields once the first spent it, in order", async () => {
      const clock = new FakeClock();
      const turn = new TurnTime(10, () => clock.now());
      const bound = { budgetMs: 10, minUnits: 1, now: () => clock.now(), shared: turn };
      const intake = new GroupCommit(database.db, 256, 0, 0, bound);
      const attempts = new GroupCommit(database.db, 256, 0, 0, bound);
      const transactions = vi.spyOn(database.db, "transaction");
      const settled: string[] = [];
      const a = intake.run(costly(clock, "a", 12));
      const b = ["b1", "b2", "b3"].map((v) => attempts.run(costly(clock, v, 1)));
      for (const [i, p] of [a, ...b].entries()) void p.then(() => settled.push(`${i}:${rows().length}`));
      expect(await Promise.all([a, ...b])).toEqual(["a", "b1", "b2", "b3"]);
      // a spent the turn's 10 ms: b1 runs (the floor), b2 and b3 wait for the next turn's budget.
      expect(transactions).toHaveBeenCalledTimes(3);
      expect(rows()).toEqual(["a", "b1", "b2", "b3"]);
      expect(settled).toEqual(["0:1", "1:2", "2:4", "3:4"]);
    });

    it("a turn whose upstream calls spent the clock flushes only its floor: one clock for all background work", async () => {
      const clock = new FakeClock();
      const turn = new TurnTime(10, () => clock.now());
      const commits = new GroupCommit(database.db, 256, 0, 0, {
        budgetMs: 10,
        minUnits: 1,
        now: () => clock.now(),
        shared: turn,
      });
      const transactions = vi.spyOn(database.db, "transaction");
      const units = ["a", "b", "c"].map((v) => commits.run(costly(clock, v, 1)));
      // Before the flush, in the same turn, a gated piece (an upstream call's start) takes the turn's 10 ms.
      await turn.run(() => clock.advance(12));
      expect(await Promise.all(units)).toEqual(["a", "b", "c"]);
      // The flush's floor in this turn (a), the rest in the next turn, on a fresh clock (b and c in one commit).
      expect(transactions).toHaveBeenCalledTimes(2);
      expect(rows()).toEqual(["a", "b", "c"]);
    });

    it("close() commits everything queued on commits sharing a budget", async () => {
      const clock = new FakeClock();
      const bound = { budgetMs: 10, minUnits: 1, now: () => clock.now(), shared: new TurnTime(10, () => clock.now()) };
      const intake = new GroupCommit(database.db, 256, 0, 0, bound);
      const attempts = new GroupCommit(database.db, 256, 0, 0, bound);
      const queued = [intake.run(costly(clock, "a", 20)), attempts.run(costly(clock, "b", 20))];
      intake.close();
      attempts.close();
      expect(await Promise.all(queued)).toEqual(["a", "b"]);
      expect(rows()).toEqual(["a", "b"]);
    });

    it("a unit longer than the budget still runs, one a turn; a batch within it stays one commit", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      const transactions = vi.spyOn(database.db, "transaction");
      await Promise.all(["x", "y"].map((v) => commits.run(costly(clock, v, 50))));
      expect(transactions).toHaveBeenCalledTimes(2);
      transactions.mockClear();
      await Promise.all(["p", "q", "r"].map((v) => commits.run(costly(clock, v, 3))));
      expect(transactions).toHaveBeenCalledTimes(1);
      expect(rows()).toEqual(["x", "y", "p", "q", "r"]);
    });

    it("a batch of fewer than minUnits is never cut, however long it takes (a descheduled thread)", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 3, now: () => clock.now() });
      const transactions = vi.spyOn(database.db, "transaction");
      await Promise.all(["a", "b", "c", "d"].map((v) => commits.run(costly(clock, v, 50))));
      // a, b and c run whatever the clock says; d, past the budget, is cut to the next turn.
      expect(transactions).toHaveBeenCalledTimes(2);
      expect(rows()).toEqual(["a", "b", "c", "d"]);
    });

    it("a unit queued withPrevious is never cut from the one before it: the cut falls after both", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      const transactions = vi.spyOn(database.db, "transaction");
      // record + health pairs, as a delivery attempt queues them; each record costs 6 ms.
      const record = (v: string) => commits.run(costly(clock, v, 6));
      const health = (v: string) => commits.runAtomic(costly(clock, v, 0), { withPrevious: true });
      const queued = [record("r1"), health("h1"), record("r2"), health("h2"), record("r3"), health("h3")];
      const committed: string[][] = [];
      for (const p of queued) void p.then(() => committed.push(rows() as string[]));
      await Promise.all(queued);
      // Without the option the 10 ms budget cuts between r2 and h2 (12 ms spent); with it, after h2.
      expect(transactions).toHaveBeenCalledTimes(2);
      expect(committed.map((r) => r.length)).toEqual([4, 4, 4, 4, 6, 6]);
      expect(rows()).toEqual(["r1", "h1", "r2", "h2", "r3", "h3"]);
    });

    it("close() commits everything queued at once, whatever the budget", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      const queued = ["a", "b", "c"].map((v) => commits.run(costly(clock, v, 50)));
      commits.close();
      expect(rows()).toEqual(["a", "b", "c"]);
      expect(await Promise.all(queued)).toEqual(["a", "b", "c"]);
    });

    it("a commit that fails rejects only the part that ran; the part left over commits in its own turn", async () => {
      const clock = new FakeClock();
      const commits = new GroupCommit(database.db, 256, 0, 0, { budgetMs: 10, minUnits: 1, now: () => clock.now() });
      database.sqlite.exec(
        "CREATE TABLE parent (id TEXT PRIMARY KEY); CREATE TABLE child (p TEXT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
      );
      const a = commits.runAtomic((tx) => {
        // Checked at COMMIT only: this part's commit fails, after the budget cut the batch.
        tx.run(sql`INSERT INTO child (p) VALUES ('missing')`);
        return costly(clock, "a", 20)(tx);
      });
      const b = commits.run(costly(clock, "b", 1));
      await expect(a).rejects.toThrow("FOREIGN KEY constraint failed");
      await expect(b).resolves.toBe("b");
      expect(rows()).toEqual(["b"]);
    });
  });
});

import { sql } from "drizzle-orm";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GroupCommit } from "../../src/db/sqlite/group-commit.js";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { WalSync } from "../../src/db/sqlite/wal-sync.js";

/** A WalSync whose fdatasync calls wait until the test lets them return. */
function heldSync(walPath: string) {
  const calls: Array<(err: Error | null) => void> = [];
  const sync = new WalSync(walPath, (_fd, done) => void calls.push(done));
  return { sync, calls };
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("GroupCommit with the WAL synced off the event loop (issue #38 item 7)", () => {
  let dir: string;
  let database: Database_;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "genrelay-walsync-"));
    database = openDatabase(join(dir, "db.sqlite"));
    database.sqlite.exec("CREATE TABLE items (v TEXT NOT NULL UNIQUE)");
  });
  afterEach(() => {
    database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const walPath = () => `${database.sqlite.name}-wal`;
  const count = () => (database.sqlite.prepare("SELECT count(*) AS n FROM items").get() as { n: number }).n;
  const synchronous = () => database.sqlite.pragma("synchronous", { simple: true });

  it("commits without an fsync on this thread and settles its units only once the WAL's sync returns", async () => {
    const { sync, calls } = heldSync(walPath());
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: sync });
    let modeInside: unknown;
    const settled: string[] = [];
    const units = ["a", "b"].map((v) =>
      commits
        .run((tx) => {
          modeInside = synchronous();
          tx.run(sql`INSERT INTO items (v) VALUES (${v})`);
          return v;
        })
        .then((x) => settled.push(x)),
    );
    await nextTurn();
    await nextTurn();
    // Committed (visible), NORMAL inside the commit (1: no fsync), FULL again for every other write (2).
    expect(count()).toBe(2);
    expect(modeInside).toBe(1);
    expect(synchronous()).toBe(2);
    // Not settled: the sync has not returned, and the loop went on meanwhile.
    expect(calls).toHaveLength(1);
    expect(settled).toEqual([]);
    calls[0]!(null);
    await Promise.all(units);
    expect(settled).toEqual(["a", "b"]);
  });

  it("two syncs run at once; a third commit shares the next; a later sync ending first settles the earlier commits too", async () => {
    const { sync, calls } = heldSync(walPath());
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: sync });
    const settled: string[] = [];
    const insert = (v: string) =>
      commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES (${v})`)).then(() => settled.push(v));
    const first = insert("a");
    await nextTurn();
    const second = insert("b");
    await nextTurn();
    const third = insert("c");
    await nextTurn();
    // Three commits; a sync each for "a" and "b" at once, "c" waits for one of them to end.
    expect(count()).toBe(3);
    expect(calls).toHaveLength(2);
    // The second sync began after both commits: its end settles "a" and "b", in order, and starts "c"'s.
    calls[1]!(null);
    await Promise.all([first, second]);
    expect(settled).toEqual(["a", "b"]);
    expect(calls).toHaveLength(3);
    // The first sync ending late settles nothing twice.
    calls[0]!(null);
    calls[2]!(null);
    await third;
    expect(settled).toEqual(["a", "b", "c"]);
  });

  it("a failed sync fails the units it was to make durable, as a failed COMMIT would", async () => {
    const { sync, calls } = heldSync(walPath());
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: sync });
    const unit = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('a')`));
    await nextTurn();
    await nextTurn();
    calls[0]!(new Error("EIO: i/o error, fdatasync"));
    await expect(unit).rejects.toThrow("EIO: i/o error, fdatasync");
  });

  it("close() settles units still waiting for their sync, syncing in place", async () => {
    const { sync, calls } = heldSync(walPath());
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: sync });
    const early = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('early')`));
    await nextTurn();
    await nextTurn();
    expect(calls).toHaveLength(1);
    const late = commits.run((tx) => tx.run(sql`INSERT INTO items (v) VALUES ('late')`));
    commits.close();
    await expect(Promise.all([early, late])).resolves.toHaveLength(2);
    expect(count()).toBe(2);
    // The held sync returning afterwards settles nothing twice.
    calls[0]!(null);
  });

  it("a flush on a connection closed meanwhile rejects its units; nothing is thrown out of its turn", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: new WalSync(walPath()) });
    const unit = commits.run(() => "x");
    database.close();
    await expect(unit).rejects.toThrow("The database connection is not open");
  });

  it("a flush commits at synchronous = NORMAL; every other write, after it or after a failed one, at FULL", async () => {
    const level = () => database.sqlite.pragma("synchronous", { simple: true });
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: new WalSync(walPath()) });
    expect(level()).toBe(2);
    await expect(commits.run(() => level())).resolves.toBe(1);
    expect(level()).toBe(2);
    // A flush whose transaction ends early (as a disk-full error rolls it all back): its units
    // reject, and the connection is back at FULL.
    const failing = commits.run(() => {
      database.sqlite.exec("ROLLBACK");
      throw new Error("rolled back");
    });
    await expect(failing).rejects.toThrow();
    expect(database.sqlite.inTransaction).toBe(false);
    expect(level()).toBe(2);
    commits.close();
  });

  it("with the real fdatasync, units settle after the sync on the thread pool", async () => {
    const commits = new GroupCommit(database.db, 256, 0, 0, { walSync: new WalSync(walPath()) });
    const values = await Promise.all(["a", "b", "c"].map((v) => commits.run(() => v)));
    expect(values).toEqual(["a", "b", "c"]);
    commits.close();
  });
});

import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { systemClock } from "../../src/clock.js";
import { backupDatabase } from "../../src/db/sqlite/backup.js";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { insertTestClient } from "../helpers/relay.js";

/** The database holds webhook secrets: what the relay creates is readable by its own user only. */
const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

let previousUmask: number;
let dir: string;
const open: Database_[] = [];

// The usual umask, under which a plain create gives 0644 files and 0755 folders.
beforeAll(() => {
  previousUmask = process.umask(0o022);
});
afterAll(() => {
  process.umask(previousUmask);
});
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-modes-"));
});
afterEach(() => {
  for (const d of open.splice(0)) d.close();
  rmSync(dir, { recursive: true, force: true });
});

function openAt(path: string): Database_ {
  const database = openDatabase(path);
  open.push(database);
  return database;
}

describe("file modes", () => {
  it("a new database is 0600 with its -wal and -shm, in new folders of 0700", () => {
    const path = join(dir, "data", "nested", "relay.db");
    const database = openAt(path);
    insertTestClient(database.db, systemClock, { name: "modes" });
    expect(mode(join(dir, "data"))).toBe("700");
    expect(mode(join(dir, "data", "nested"))).toBe("700");
    expect(mode(path)).toBe("600");
    expect(mode(`${path}-wal`)).toBe("600");
    expect(mode(`${path}-shm`)).toBe("600");
  });

  it("an existing folder keeps its mode; an existing database file is opened as it is", () => {
    const shared = join(dir, "shared");
    mkdirSync(shared, { mode: 0o755 });
    const path = join(shared, "relay.db");
    writeFileSync(path, "", { mode: 0o640 });
    openAt(path);
    expect(mode(shared)).toBe("755");
    expect(mode(path)).toBe("640");
  });

  it.each([false, true])("a backup (overwrite %s) is 0600", async (overwrite) => {
    const database = openAt(join(dir, "relay.db"));
    insertTestClient(database.db, systemClock, { name: "modes" });
    const target = join(dir, "copy.db");
    if (overwrite) await backupDatabase(database.sqlite, join(dir, "relay.db"), target, { overwrite: false });
    const result = await backupDatabase(database.sqlite, join(dir, "relay.db"), target, { overwrite });
    expect(result.check).toBe("ok");
    expect(mode(target)).toBe("600");
  });
});

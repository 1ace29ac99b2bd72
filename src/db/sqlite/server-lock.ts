import Database from "better-sqlite3";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

/**
 * One server per SQLite file (docs/operations.md): the server holds an exclusive SQLite lock on a
 * companion file for its whole life. The operating system drops it when the process ends, however
 * it ends, so there is no stale lock to clean up; the CLI never takes it, so it works beside the
 * server. Returns the lock's release, or null when another server holds it.
 */
export function takeServerLock(databasePath: string): { path: string; release(): void } | null {
  const path = `${databasePath}.server-lock`;
  mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path, { timeout: 0 });
  try {
    db.pragma("locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE");
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === "SQLITE_BUSY") return null;
    throw err;
  }
  return {
    path,
    release() {
      if (db.open) db.close();
    },
  };
}

import Database from "better-sqlite3";
import { closeSync, existsSync, linkSync, openSync, realpathSync, renameSync, statSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";

/** A backup that cannot be made as asked (the CLI reports the message as is). */
export class BackupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BackupError";
  }
}

export interface BackupResult {
  path: string;
  bytes: number;
  pages: number;
  /** `PRAGMA quick_check` of the finished copy: "ok" or the first problem found. */
  check: string;
}

/** Resolves symlinks of a path that may not exist yet (its folder must). */
function canonical(path: string): string {
  const full = resolve(path);
  try {
    return realpathSync(full);
  } catch {
    try {
      return join(realpathSync(dirname(full)), basename(full));
    } catch {
      return full;
    }
  }
}

function removeQuietly(path: string): void {
  for (const p of [path, `${path}-journal`, `${path}-wal`, `${path}-shm`]) {
    try {
      unlinkSync(p);
    } catch {
      // not there: nothing to clean
    }
  }
}

/**
 * Puts the finished copy in place. Without overwrite, link() fails with EEXIST when the
 * destination appeared meanwhile, so an existing file is never replaced by a race; filesystems
 * without hard links fall back to a check and rename.
 */
function publish(tmp: string, destination: string, overwrite: boolean): void {
  if (overwrite) {
    renameSync(tmp, destination);
    return;
  }
  try {
    linkSync(tmp, destination);
    unlinkSync(tmp);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new BackupError(`${destination} already exists (use --force to replace it)`);
    if (existsSync(destination)) throw new BackupError(`${destination} already exists (use --force to replace it)`);
    renameSync(tmp, destination);
  }
}

/**
 * Copies a live database to `destination` with SQLite's online backup API, consistent as of one
 * moment, while other connections (the server) keep writing.
 *
 * The copy is written beside the destination under a temporary name and moved into place only when
 * complete and checked, so a failed or interrupted backup never leaves a half-written file under
 * the real name. All pages are copied in one step: in WAL mode that step reads a single snapshot and
 * does not block writers, whereas small steps would restart whenever the server writes in between.
 * The copy is switched to the rollback journal, so it is one self-contained file (the server turns
 * WAL back on when it opens a restored copy).
 */
export async function backupDatabase(
  sqlite: Database.Database,
  sourcePath: string,
  destination: string,
  opts: { overwrite: boolean },
): Promise<BackupResult> {
  const target = resolve(destination);
  const dir = dirname(target);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new BackupError(`folder ${dir} does not exist`);
  const source = canonical(sourcePath);
  const dest = canonical(target);
  if ([source, `${source}-wal`, `${source}-shm`, `${source}-journal`].includes(dest)) {
    throw new BackupError(`${destination} is the live database itself: choose another file`);
  }
  if (existsSync(target)) {
    if (!opts.overwrite) throw new BackupError(`${destination} already exists (use --force to replace it)`);
    if (statSync(target).isDirectory()) throw new BackupError(`${destination} is a folder`);
  }

  const tmp = join(dir, `.${basename(target)}.${process.pid}.partial`);
  removeQuietly(tmp);
  try {
    // Created 0600 before SQLite writes into it (a copy of the database holds webhook secrets); the
    // mode travels with the file when it is moved into place.
    closeSync(openSync(tmp, "wx", 0o600));
    const progress = await sqlite.backup(tmp, { progress: () => 0x7fffffff });
    const copy = new Database(tmp, { fileMustExist: true });
    let check: string;
    try {
      copy.pragma("journal_mode = DELETE");
      const rows = copy.pragma("quick_check") as { quick_check: string }[];
      check = rows.map((r) => r.quick_check).join("; ");
    } finally {
      copy.close();
    }
    if (check !== "ok") throw new BackupError(`the copy failed its integrity check: ${check}`);
    publish(tmp, target, opts.overwrite);
    return { path: target, bytes: statSync(target).size, pages: progress.totalPages, check };
  } finally {
    removeQuietly(tmp);
  }
}

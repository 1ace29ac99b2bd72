import type { Statement } from "better-sqlite3";
import type { Database_ } from "./open.js";

const savepoints = new WeakMap<Database_["sqlite"], Record<"open" | "undo" | "close", Statement>>();

/**
 * Runs `work` (several writes) inside the open transaction as one unit: what it wrote is rolled
 * back when it throws, the rest of the transaction kept. Its three statements are prepared once per
 * database, where drizzle's nested transaction builds and looks up its savepoint's SQL every time.
 * Units nest (SQLite's RELEASE and ROLLBACK TO take the innermost savepoint of the name): an
 * attempt's record in a group-commit unit, say.
 */
export function inSavepoint<T>(sqlite: Database_["sqlite"], work: () => T): T {
  let sp = savepoints.get(sqlite);
  if (!sp) {
    sp = {
      open: sqlite.prepare("SAVEPOINT unit"),
      undo: sqlite.prepare("ROLLBACK TO SAVEPOINT unit"),
      close: sqlite.prepare("RELEASE SAVEPOINT unit"),
    };
    savepoints.set(sqlite, sp);
  }
  sp.open.run();
  let value: T;
  try {
    value = work();
  } catch (error) {
    // An error that ended the whole transaction (I/O, disk full) left no savepoint to roll back to.
    if (sqlite.inTransaction) {
      sp.undo.run();
      sp.close.run();
    }
    throw error;
  }
  sp.close.run();
  return value;
}

import { sql } from "drizzle-orm";
import type { Database_ } from "./sqlite/open.js";
import { healthProbe } from "./sqlite/schema.js";

/**
 * /readyz's storage probe: a write that needs fresh pages (a 16 KiB row), committed and then
 * removed, so a full disk or a failing device shows here and not only in the next request.
 * A lock held by another writer (the CLI) means busy, not unwritable: the probe never waits on it.
 * Returns the problem, or null.
 */
export function probeWrite(database: Database_, now: number): string | null {
  const { db, sqlite } = database;
  sqlite.pragma("busy_timeout = 0");
  try {
    db.transaction(
      (tx) => {
        tx.insert(healthProbe).values({ at: now, pad: sql`zeroblob(16384)` }).run();
        tx.delete(healthProbe).run();
      },
      { behavior: "immediate" },
    );
    return null;
  } catch (err) {
    if ((err as { code?: string }).code === "SQLITE_BUSY") return null;
    return `database not writable: ${(err as Error).message}`;
  } finally {
    sqlite.pragma("busy_timeout = 5000");
  }
}

import type { OpsStore } from "../../store/store.js";
import { releaseAllTaskLeases } from "./tasks.js";
import { releaseLeases } from "./release-leases.js";
import { and, eq, sql } from "drizzle-orm";
import type { SqliteContext } from "./context.js";
import type { Database_, Db } from "./open.js";
import { events, healthProbe } from "./schema.js";

/** The OpsStore on SQLite: leadership (one process), recovery, lease release, the write probe, gauges. */
export function sqliteOps(s: SqliteContext): OpsStore {
  const db = s.database.db;
  return {
    // One process: always the leader, and nothing to fence (claims ignore the fence).
    leads: async (account) => ({ account, fence: 0 }),
    listen: async () => {},
    recover: async (hostOf) => {
      const released = releaseAllTaskLeases(db) + releaseAllEventLeases(db);
      for (const url of eventsWithoutDestination(db)) setDestination(db, url, hostOf(url));
      return released;
    },
    releaseLeases: async (prefix) => releaseLeases(db, prefix),
    probeWrite: async (now) => probeWrite(s.database, now),
    gauges: async () => ({
      tasksByStatus: db.all<{ status: string; n: number }>(
        sql`SELECT status, count(*) AS n FROM tasks GROUP BY status`,
      ),
      tasksByAccountPhase: db.all<{ account: string; phase: string; n: number }>(
        sql`SELECT upstream_account AS account, phase, count(*) AS n FROM tasks WHERE phase IN ('waiting', 'submitted') GROUP BY upstream_account, phase`,
      ),
      eventsByStatus: db.all<{ status: string; n: number }>(
        sql`SELECT delivery_status AS status, count(*) AS n FROM events WHERE delivery_status IN ('pending', 'failed') GROUP BY delivery_status`,
      ),
    }),
  };
}

/** Releases every event lease (start of a single-process relay: any lease left is a dead process's). */
function releaseAllEventLeases(db: Db): number {
  return db
    .update(events)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${events.claimToken} IS NOT NULL`)
    .run().changes;
}

/** Events stored before destination_host existed: filled in once at start (the caller parses the URLs). */
function eventsWithoutDestination(db: Db): string[] {
  return db
    .selectDistinct({ url: events.callbackUrl })
    .from(events)
    .where(and(eq(events.destinationHost, ""), sql`${events.callbackUrl} IS NOT NULL`))
    .all()
    .map((r) => r.url!);
}

function setDestination(db: Db, url: string, host: string): void {
  db.update(events)
    .set({ destinationHost: host })
    .where(and(eq(events.callbackUrl, url), eq(events.destinationHost, "")))
    .run();
}

/**
 * /readyz's database probe: a write that needs fresh pages (a 16 KiB row), committed and then
 * removed, so a full disk or a failing device shows here and not only in the next request.
 * A lock held by another writer (the CLI) means busy, not unwritable: the probe never waits on it.
 * Returns the problem, or null.
 */
function probeWrite(database: Database_, now: number): string | null {
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

import type { OpsStore } from "../../store/store.js";
import { eventsWithoutDestination, releaseAllEventLeases, setDestination } from "../events.js";
import { probeWrite } from "../health.js";
import { releaseAllTaskLeases } from "./tasks.js";
import { releaseLeasesOf } from "./release-leases.js";
import { sql } from "drizzle-orm";
import type { SqliteContext } from "./context.js";

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
    releaseLeases: async (prefix) => releaseLeasesOf(db, prefix),
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

import { and, asc, eq, gt, lte, sql } from "drizzle-orm";
import type { RateLimitStore } from "../../store/store.js";
import { slidingVerdict } from "../../store/rate-window.js";
import { rateLimitHits } from "./schema.js";
import type { SqliteContext } from "./context.js";

/** The RateLimitStore on SQLite: per-client sliding windows in rate_limit_hits, one transaction a take. */
export function sqliteRateLimits(s: SqliteContext): RateLimitStore {
  const db = s.database.db;
  return {
    take: async (clientId, action, now, limit, windowMs) =>
      db.transaction((tx) => {
        const key = and(eq(rateLimitHits.clientId, clientId), eq(rateLimitHits.action, action));
        tx.delete(rateLimitHits)
          .where(and(key, lte(rateLimitHits.at, now - windowMs)))
          .run();
        const counted = tx
          .select({ at: rateLimitHits.at })
          .from(rateLimitHits)
          .where(and(key, gt(rateLimitHits.at, now - windowMs)))
          .orderBy(asc(rateLimitHits.at))
          .all()
          .map((r) => r.at);
        const verdict = slidingVerdict(counted, limit, windowMs, now);
        if (verdict.allowed) tx.insert(rateLimitHits).values({ clientId, action, at: now }).run();
        return verdict;
      }),
    renew: async (clientId, action, at, now) =>
      db.transaction((tx) => {
        const moved = tx.run(
          sql`UPDATE rate_limit_hits SET at = ${now} WHERE rowid = (SELECT rowid FROM rate_limit_hits WHERE client_id = ${clientId} AND action = ${action} AND at = ${at} LIMIT 1)`,
        );
        if (moved.changes === 0) tx.insert(rateLimitHits).values({ clientId, action, at: now }).run();
      }),
    give: async (clientId, action, at) => {
      // One of the counts at `at` (several may share the millisecond: any of them is the same).
      db.run(
        sql`DELETE FROM rate_limit_hits WHERE rowid = (SELECT rowid FROM rate_limit_hits WHERE client_id = ${clientId} AND action = ${action} AND at = ${at} LIMIT 1)`,
      );
    },
  };
}

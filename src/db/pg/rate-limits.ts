import type { RateLimitStore } from "../../store/store.js";
import { slidingVerdict } from "../../store/rate-window.js";
import { RATE_LIMIT_LOCK_SPACE } from "./mapping.js";
import type { PgContext } from "./context.js";
import { awaitChanges } from "./watch-barrier.js";

/**
 * The RateLimitStore on PostgreSQL: per-client sliding windows in rate_limit_hits. A take holds a
 * transaction-level advisory lock on its (client, action) while it counts and inserts, so takers
 * on every instance see each other's counts (without it, two could both count nine of ten).
 */
export function pgRateLimits(s: PgContext): RateLimitStore {
  const { q } = s;
  return {
    take: async (clientId, action, now, limit, windowMs) => {
      const verdict = await s.tx(async (c) => {
        await q(
          "SELECT pg_advisory_xact_lock($1, hashtext($2 || '|' || $3))",
          [RATE_LIMIT_LOCK_SPACE, clientId, action],
          c,
        );
        await q(
          "DELETE FROM rate_limit_hits WHERE client_id = $1 AND action = $2 AND at <= $3",
          [clientId, action, now - windowMs],
          c,
        );
        const counted = (
          await q(
            "SELECT at FROM rate_limit_hits WHERE client_id = $1 AND action = $2 AND at > $3 ORDER BY at",
            [clientId, action, now - windowMs],
            c,
          )
        ).map((r) => Number(r.at));
        const verdict = slidingVerdict(counted, limit, windowMs, now);
        if (verdict.allowed)
          await q(
            "INSERT INTO rate_limit_hits (client_id, action, at) VALUES ($1, $2, $3)",
            [clientId, action, now],
            c,
          );
        return verdict;
      });
      // A watcher's place: the transitions that decided not to notify without seeing it end first (watch-barrier.ts).
      if (verdict.allowed) await awaitChanges(s.pool, clientId, action);
      return verdict;
    },
    renew: async (clientId, action, at, now) => {
      // One statement: the count moved, or (none left at `at`) a new one.
      await q(
        `WITH moved AS (
           UPDATE rate_limit_hits SET at = $4
           WHERE id = (SELECT id FROM rate_limit_hits WHERE client_id = $1 AND action = $2 AND at = $3 LIMIT 1 FOR UPDATE SKIP LOCKED)
           RETURNING id
         )
         INSERT INTO rate_limit_hits (client_id, action, at) SELECT $1, $2, $4 WHERE NOT EXISTS (SELECT 1 FROM moved)`,
        [clientId, action, at, now],
      );
    },
    give: async (clientId, action, at) => {
      // One of the counts at `at` (several may share the millisecond: any of them is the same).
      // SKIP LOCKED: gives at once of the same millisecond each delete another row, not all the same one.
      await q(
        "DELETE FROM rate_limit_hits WHERE id = (SELECT id FROM rate_limit_hits WHERE client_id = $1 AND action = $2 AND at = $3 LIMIT 1 FOR UPDATE SKIP LOCKED)",
        [clientId, action, at],
      );
    },
  };
}

import { sql } from "drizzle-orm";
import type { Db } from "../db/open.js";
import { claimDueTasks, type TaskRow } from "../db/tasks.js";
import type { LeaseOwner } from "./owner.js";

/**
 * Picks the waiting tasks to submit next on one account, round-robin across clients: every client's
 * oldest due task comes before any client's second, and among clients the one admitted longest ago
 * goes first. A flood from one client therefore cannot starve another. Clients at their own running
 * cap are skipped. Then the picked rows are claimed under a lease.
 */
export function claimFairly(
  db: Db,
  opts: { account: string; now: number; leaseMs: number; owner: LeaseOwner; limit: number },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const rows = db.all<{ id: string }>(sql`
    WITH running AS (
      SELECT client_id, count(*) AS n FROM tasks
      WHERE phase = 'submitted' AND upstream_account = ${opts.account}
      GROUP BY client_id
    ),
    ranked AS (
      SELECT t.id, t.client_id,
             row_number() OVER (PARTITION BY t.client_id ORDER BY t.next_run_at, t.id) AS rn
      FROM tasks t
      WHERE t.phase = 'waiting' AND t.upstream_account = ${opts.account}
        AND t.next_run_at <= ${opts.now}
        AND (t.claimed_until IS NULL OR t.claimed_until < ${opts.now})
    )
    SELECT r.id FROM ranked r
    JOIN clients c ON c.id = r.client_id
    LEFT JOIN running ru ON ru.client_id = r.client_id
    WHERE c.max_running IS NULL OR r.rn <= c.max_running - coalesce(ru.n, 0)
    ORDER BY r.rn, c.last_admitted_at, r.client_id
    LIMIT ${opts.limit}
  `);
  if (rows.length === 0) return [];
  return claimDueTasks(db, {
    phase: "waiting",
    account: opts.account,
    now: opts.now,
    leaseMs: opts.leaseMs,
    token: opts.owner.token(),
    limit: opts.limit,
    ids: rows.map((r) => r.id),
  });
}

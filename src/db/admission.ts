import { sql } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import { interleave } from "../store/fairness.js";
import { claimDueTasks, type TaskRow } from "./tasks.js";

interface Candidate {
  id: string;
  max_running: number | null;
  running: number;
}

/**
 * Picks the waiting tasks to submit next on one account, round-robin across clients: every client's
 * oldest due task comes before any client's second, and among clients the one admitted longest ago
 * goes first. A flood from one client therefore cannot starve another. Clients at their own running
 * cap are skipped. Each client's queue is read through the (phase, account, client, next_run_at)
 * index, at most `limit` rows deep, so the cost does not grow with the backlog. Then the picked
 * rows are claimed under a lease.
 */
export function claimFairly(
  db: Db,
  opts: { account: string; now: number; leaseMs: number; token: string; limit: number },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const { account, now } = opts;
  const candidates = db.all<Candidate>(sql`
    SELECT c.id, c.max_running,
           (SELECT count(*) FROM tasks r WHERE r.phase = 'submitted' AND r.upstream_account = ${account} AND r.client_id = c.id) AS running
    FROM clients c
    WHERE c.upstream_account = ${account}
      AND EXISTS (SELECT 1 FROM tasks t
                  WHERE t.phase = 'waiting' AND t.upstream_account = ${account} AND t.client_id = c.id
                    AND t.next_run_at <= ${now} AND (t.claimed_until IS NULL OR t.claimed_until < ${now}))
    ORDER BY c.last_admitted_at, c.id`);
  const queues: string[][] = [];
  for (const c of candidates) {
    const room = c.max_running === null ? opts.limit : Math.min(opts.limit, c.max_running - c.running);
    if (room <= 0) continue;
    const ids = db.all<{ id: string }>(sql`
      SELECT id FROM tasks
      WHERE phase = 'waiting' AND upstream_account = ${account} AND client_id = ${c.id}
        AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
      ORDER BY next_run_at, id
      LIMIT ${room}`);
    queues.push(ids.map((r) => r.id));
  }
  const picked = interleave(queues, opts.limit);
  if (picked.length === 0) return [];
  const claimed = claimDueTasks(db, {
    phase: "waiting",
    account,
    now,
    leaseMs: opts.leaseMs,
    token: opts.token,
    limit: picked.length,
    ids: picked,
  });
  // Submit in the order picked (claimDueTasks returns rows in storage order).
  const order = new Map(picked.map((id, i) => [id, i]));
  return claimed.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
}

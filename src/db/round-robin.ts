import { sql } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import { pickWithinRoom, type ClientRoom } from "../store/fairness.js";
import { claimTasks, type TaskRow } from "./tasks.js";
import type { TaskPhase } from "./sqlite/schema.js";

/**
 * Due, unleased tasks of a phase, round-robin across clients (TaskStore.claimAcrossClients): every
 * client's oldest due task before any client's second; clients ranked by `rank` (lowest first),
 * then by how long their oldest task has waited. Each client's queue is read at most `limit` deep;
 * with `clientRoom` (a worker's fair pool), a client with no room is not read, and the others take
 * no more than theirs (pickWithinRoom, asked before each pick).
 */
export function claimAcrossClients(
  db: Db,
  phase: TaskPhase,
  opts: {
    now: number;
    leaseMs: number;
    token: string;
    limit: number;
    rank: (clientId: string) => number;
    clientRoom?: ClientRoom | undefined;
  },
): TaskRow[] {
  if (opts.limit <= 0) return [];
  const { now } = opts;
  const candidates = db.all<{ client_id: string; first: number }>(sql`
    SELECT client_id, min(next_run_at) AS first FROM tasks
    WHERE phase = ${phase} AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
    GROUP BY client_id`);
  candidates.sort((a, b) => opts.rank(a.client_id) - opts.rank(b.client_id) || a.first - b.first);
  const none = new Map<string, number>();
  const queued = candidates
    .filter((c) => !opts.clientRoom || opts.clientRoom(c.client_id, none) > 0)
    .flatMap((c) =>
      db
        .all<{ id: string }>(sql`
          SELECT id FROM tasks
          WHERE phase = ${phase} AND client_id = ${c.client_id} AND next_run_at <= ${now} AND (claimed_until IS NULL OR claimed_until < ${now})
          ORDER BY next_run_at, id LIMIT ${opts.limit}`)
        .map((r) => ({ id: r.id, clientId: c.client_id, host: "" })),
    );
  // Clients in rank order, one task each per turn, each within its room.
  const picked = pickWithinRoom(queued, opts.limit, () => Infinity, opts.clientRoom).map((t) => t.id);
  const claimed = claimTasks(db, { ids: picked, phase, now, leaseMs: opts.leaseMs, token: opts.token });
  const order = new Map(picked.map((id, i) => [id, i]));
  return claimed.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
}

import type { TaskRow } from "../../store/rows.js";
import { clientRoom, type TaskClaimOperations } from "../kit/task-claims.js";
import { interleave, pickWithinRoom } from "../../store/fairness.js";
import type { PgContext } from "./context.js";
import { unclaimed } from "./mapping.js";
import { inPickedOrder } from "../kit/claim-order.js";
import { wakeAt } from "../kit/due-time.js";

/** The claim side of the TaskStore on PostgreSQL: leases on due tasks, due times, the accounts and counts the loops read. */
export function pgTaskClaims(s: PgContext): TaskClaimOperations {
  const { q, one } = s;
  return {
    claimFairly: async (account, o) => {
      if (o.limit <= 0) return [];
      const candidates = await q(
        `SELECT c.id, c.max_running,
                (SELECT count(*) FROM tasks r WHERE r.phase = 'submitted' AND r.upstream_account = $1 AND r.client_id = c.id) AS running
         FROM clients c
         WHERE c.upstream_account = $1
           AND EXISTS (SELECT 1 FROM tasks t WHERE t.phase = 'waiting' AND t.upstream_account = $1 AND t.client_id = c.id
                         AND t.next_run_at <= $2 AND ${unclaimed(2).replaceAll("claimed_until", "t.claimed_until")})
         ORDER BY c.last_admitted_at NULLS FIRST, c.id`,
        [account, o.now],
      );
      const queues: string[][] = [];
      for (const cand of candidates) {
        const max = cand.max_running === null ? null : Number(cand.max_running);
        const room = clientRoom(max, Number(cand.running), o.limit);
        if (room <= 0) continue;
        const ids = await q(
          `SELECT id FROM tasks WHERE phase = 'waiting' AND upstream_account = $1 AND client_id = $2 AND next_run_at <= $3 AND ${unclaimed(3)}
           ORDER BY next_run_at, id LIMIT $4`,
          [account, cand.id, o.now, room],
        );
        queues.push(ids.map((r) => r.id as string));
      }
      const picked = interleave(queues, o.limit);
      if (picked.length === 0) return [];
      const claimed = await s.claimTasks(
        `id = ANY($4::text[]) AND phase = 'waiting' AND next_run_at <= $3`,
        [picked],
        o,
      );
      return inPickedOrder(claimed, picked);
    },
    claimDue: async (phase, account, o) =>
      (
        await s.claimTasks(
          `phase = $4 AND upstream_account = $5 AND next_run_at <= $3`,
          [phase, account],
          o,
          "ORDER BY next_run_at, id",
        )
      ).sort((a, b) => (a.nextRunAt ?? 0) - (b.nextRunAt ?? 0) || (a.id < b.id ? -1 : 1)),
    claimIds: async (ids, phase, o) =>
      ids.length === 0
        ? []
        : s.claimTasks(`id = ANY($4::text[]) AND phase = $5`, [ids, phase], { ...o, limit: ids.length }),
    claimExpired: async (o) =>
      s.claimTasks(`phase = 'waiting' AND submit_attempts = 0 AND expires_at <= $3`, [], o, "ORDER BY expires_at"),
    claimAcrossClients: async (phase, o) => {
      if (o.limit <= 0) return [];
      const due = `phase = $1 AND next_run_at <= $2 AND ${unclaimed(2)}`;
      const candidates = await q(
        `SELECT client_id, min(next_run_at) AS first FROM tasks WHERE ${due} GROUP BY client_id`,
        [phase, o.now],
      );
      candidates.sort(
        (a, b) => o.rank(a.client_id as string) - o.rank(b.client_id as string) || Number(a.first) - Number(b.first),
      );
      // As SQLite's (db/sqlite/task-claims.ts): clients in rank order, one task each per turn, each within its room; a client with none is not read.
      const queued: Array<{ id: string; clientId: string; host: string }> = [];
      for (const cand of candidates) {
        const clientId = cand.client_id as string;
        if (o.clientRoom && o.clientRoom(clientId, new Map()) <= 0) continue;
        const ids = await q(`SELECT id FROM tasks WHERE ${due} AND client_id = $3 ORDER BY next_run_at, id LIMIT $4`, [
          phase,
          o.now,
          clientId,
          o.limit,
        ]);
        for (const r of ids) queued.push({ id: r.id as string, clientId, host: "" });
      }
      const picked = pickWithinRoom(queued, o.limit, () => Infinity, o.clientRoom).map((t) => t.id);
      if (picked.length === 0) return [];
      const claimed = await s.claimTasks(
        `id = ANY($4::text[]) AND phase = $5 AND next_run_at <= $3`,
        [picked, phase],
        o,
      );
      return inPickedOrder(claimed, picked);
    },
    nextDueAt: async (phase, now) => {
      const due = await one(
        `SELECT next_run_at AS at FROM tasks WHERE phase = $1 AND next_run_at IS NOT NULL AND ${unclaimed(2)} ORDER BY next_run_at LIMIT 1`,
        [phase, now],
      );
      const lease = await one("SELECT min(claimed_until) AS at FROM tasks WHERE phase = $1 AND claimed_until >= $2", [
        phase,
        now,
      ]);
      return wakeAt(
        due ? Number(due.at) : null,
        lease?.at === null || lease?.at === undefined ? null : Number(lease.at),
      );
    },
    nextExpiryAt: async () => {
      const r = await one(
        "SELECT expires_at AS at FROM tasks WHERE phase = 'waiting' AND expires_at IS NOT NULL AND submit_attempts = 0 ORDER BY expires_at LIMIT 1",
      );
      return r ? Number(r.at) : null;
    },
    accountsWithDue: async (phase, now) =>
      (
        await q(
          `SELECT a.account FROM (SELECT DISTINCT upstream_account AS account FROM clients) a
           WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.phase = $1 AND t.upstream_account = a.account AND t.next_run_at <= $2
                         AND (t.claimed_until IS NULL OR t.claimed_until < $2))`,
          [phase, now],
        )
      ).map((r) => r.account as string),
    accountsInFlight: async () =>
      (await q("SELECT DISTINCT upstream_account AS account FROM tasks WHERE phase = 'submitted'")).map(
        (r) => r.account as string,
      ),
    countRunning: async (account) =>
      Number(
        (await one("SELECT count(*) AS n FROM tasks WHERE phase = 'submitted' AND upstream_account = $1", [account]))!
          .n,
      ),
    listInFlight: async (account) =>
      (
        await q(
          "SELECT id, upstream_task_id, status, submitted_at, type, model, traceparent, tracestate FROM tasks WHERE phase = 'submitted' AND upstream_account = $1",
          [account],
        )
      ).map((r) => ({
        id: r.id as string,
        upstreamTaskId: r.upstream_task_id as string | null,
        status: r.status as TaskRow["status"],
        submittedAt: r.submitted_at === null ? null : Number(r.submitted_at),
        type: r.type as "image" | "video",
        model: r.model as string,
        traceparent: r.traceparent as string | null,
        tracestate: r.tracestate as string | null,
      })),
  };
}

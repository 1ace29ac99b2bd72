import type { OpsStore } from "../../store/store.js";
import type { PgContext } from "./context.js";

/** The OpsStore on PostgreSQL: leadership, LISTEN, recovery, lease release, the write probe, gauges. */
export function pgOps(s: PgContext): OpsStore {
  const { q } = s;
  const ops: OpsStore = {
    leads: (account, as) => s.leads(account, as),
    // Every account's leader in one statement.
    leases: (as) => s.leases(as),
    listen: (nudge, taskChanged, resynced) => s.listen(nudge, taskChanged, resynced),
    recover: async (hostOf) => {
      // Other instances may be alive: their leases are left to expire. Only the backfill runs.
      for (const r of await q(
        "SELECT DISTINCT callback_url FROM events WHERE destination_host = '' AND callback_url IS NOT NULL",
      )) {
        await s.pool.query(
          "UPDATE events SET destination_host = $2 WHERE callback_url = $1 AND destination_host = ''",
          [r.callback_url, hostOf(r.callback_url as string)],
        );
      }
      return 0;
    },
    releaseLeases: async (prefix) => {
      // The owner's tokens are `<prefix>:…`, matched as a plain prefix (LIKE would read _ and % as wildcards).
      const owned = "substr(claim_token, 1, length($1::text)) = $1::text";
      const a = await s.pool.query(`UPDATE tasks SET claimed_until = NULL, claim_token = NULL WHERE ${owned}`, [
        `${prefix}:`,
      ]);
      const b = await s.pool.query(`UPDATE events SET claimed_until = NULL, claim_token = NULL WHERE ${owned}`, [
        `${prefix}:`,
      ]);
      return (a.rowCount ?? 0) + (b.rowCount ?? 0);
    },
    probeWrite: async (now) => {
      try {
        await s.tx(async (c) => {
          await q("INSERT INTO health_probe (at) VALUES ($1)", [now], c);
          await q("DELETE FROM health_probe", [], c);
        });
        return null;
      } catch (err) {
        return `database not writable: ${(err as Error).message}`;
      }
    },
    gauges: async () => ({
      tasksByStatus: (await q("SELECT status, count(*) AS n FROM tasks GROUP BY status")).map((r) => ({
        status: r.status as string,
        n: Number(r.n),
      })),
      tasksByAccountPhase: (
        await q(
          "SELECT upstream_account AS account, phase, count(*) AS n FROM tasks WHERE phase IN ('waiting', 'submitted') GROUP BY 1, 2",
        )
      ).map((r) => ({
        account: r.account as string,
        phase: r.phase as string,
        n: Number(r.n),
      })),
      eventsByStatus: (
        await q(
          "SELECT delivery_status AS status, count(*) AS n FROM events WHERE delivery_status IN ('pending', 'failed') GROUP BY 1",
        )
      ).map((r) => ({
        status: r.status as string,
        n: Number(r.n),
      })),
    }),
  };
  return ops;
}

import type pg from "pg";
import {
  DELIVERY_STATUSES,
  TASK_PHASES,
  TASK_STATUSES,
  type DeliveryStatus,
  type TaskPhase,
  type TaskStatus,
} from "../../statuses.js";

export interface PgDatabaseStats {
  /** Rows per table of the public schema (drizzle's migration log is in its own schema). */
  tables: Record<string, number>;
  tasks_by_status: Record<TaskStatus, number>;
  tasks_by_phase: Record<TaskPhase, number>;
  deliveries: Record<DeliveryStatus, number> & { oldest_pending_at: number | null };
  /** pg_database_size: the whole database on disk, indexes and TOAST included. */
  bytes: number;
}

const zeros = <K extends string>(keys: readonly K[]) =>
  Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;

/** `db stats` on PostgreSQL: the same counts as on SQLite, read in one REPEATABLE READ transaction so they agree. */
export async function pgDatabaseStats(pool: pg.Pool): Promise<PgDatabaseStats> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    const tables: Record<string, number> = {};
    for (const { name } of (
      await c.query("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
    ).rows as { name: string }[]) {
      tables[name] = Number((await c.query(`SELECT count(*) AS n FROM "${name.replaceAll('"', '""')}"`)).rows[0].n);
    }
    const byStatus = zeros(TASK_STATUSES);
    for (const r of (await c.query("SELECT status AS k, count(*) AS n FROM tasks GROUP BY status")).rows)
      byStatus[r.k as TaskStatus] = Number(r.n);
    const byPhase = zeros(TASK_PHASES);
    for (const r of (await c.query("SELECT phase AS k, count(*) AS n FROM tasks GROUP BY phase")).rows)
      byPhase[r.k as TaskPhase] = Number(r.n);
    const deliveries = { ...zeros(DELIVERY_STATUSES), oldest_pending_at: null as number | null };
    for (const r of (await c.query("SELECT delivery_status AS k, count(*) AS n FROM events GROUP BY delivery_status"))
      .rows)
      deliveries[r.k as DeliveryStatus] = Number(r.n);
    const oldest = (await c.query("SELECT min(created_at) AS at FROM events WHERE delivery_status = 'pending'")).rows[0]
      .at;
    deliveries.oldest_pending_at = oldest === null ? null : Number(oldest);
    const bytes = Number((await c.query("SELECT pg_database_size(current_database()) AS b")).rows[0].b);
    await c.query("COMMIT");
    return { tables, tasks_by_status: byStatus, tasks_by_phase: byPhase, deliveries, bytes };
  } finally {
    c.release();
  }
}

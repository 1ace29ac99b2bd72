import { sql } from "drizzle-orm";
import { statSync } from "node:fs";
import type { Db } from "./open.js";
import {
  DELIVERY_STATUSES,
  TASK_PHASES,
  TASK_STATUSES,
  type DeliveryStatus,
  type TaskPhase,
  type TaskStatus,
} from "../../statuses.js";

export interface DatabaseStats {
  /** Rows per table, every table of the file (drizzle's migration log included), by name. */
  tables: Record<string, number>;
  tasks_by_status: Record<TaskStatus, number>;
  tasks_by_phase: Record<TaskPhase, number>;
  /** Events by delivery status ("none": the task has no callback_url), and the oldest pending one. */
  deliveries: Record<DeliveryStatus, number> & { oldest_pending_at: number | null };
  pages: { page_size: number; page_count: number; freelist_count: number };
}

export interface FileSizes {
  database: number;
  wal: number;
  shm: number;
  total: number;
}

function zeros<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
}

/** Counts for an operator: a few aggregate queries, all read in one transaction so they agree. */
export function databaseStats(db: Db): DatabaseStats {
  return db.transaction((tx) => {
    const tables: Record<string, number> = {};
    const names = tx.all<{ name: string }>(
      sql`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`,
    );
    for (const { name } of names) {
      tables[name] = tx.get<{ n: number }>(sql`SELECT count(*) AS n FROM ${sql.identifier(name)}`)?.n ?? 0;
    }

    const byStatus = zeros(TASK_STATUSES);
    for (const row of tx.all<{ k: TaskStatus; n: number }>(
      sql`SELECT status AS k, count(*) AS n FROM tasks GROUP BY status`,
    ))
      byStatus[row.k] = row.n;
    const byPhase = zeros(TASK_PHASES);
    for (const row of tx.all<{ k: TaskPhase; n: number }>(
      sql`SELECT phase AS k, count(*) AS n FROM tasks GROUP BY phase`,
    ))
      byPhase[row.k] = row.n;
    const deliveries = { ...zeros(DELIVERY_STATUSES), oldest_pending_at: null as number | null };
    for (const row of tx.all<{ k: DeliveryStatus; n: number }>(
      sql`SELECT delivery_status AS k, count(*) AS n FROM events GROUP BY delivery_status`,
    )) {
      deliveries[row.k] = row.n;
    }
    deliveries.oldest_pending_at =
      tx.get<{ at: number | null }>(sql`SELECT min(created_at) AS at FROM events WHERE delivery_status = 'pending'`)
        ?.at ?? null;

    const pragma = (name: "page_size" | "page_count" | "freelist_count") =>
      tx.get<Record<string, number>>(sql.raw(`PRAGMA ${name}`))?.[name] ?? 0;
    return {
      tables,
      tasks_by_status: byStatus,
      tasks_by_phase: byPhase,
      deliveries,
      pages: {
        page_size: pragma("page_size"),
        page_count: pragma("page_count"),
        freelist_count: pragma("freelist_count"),
      },
    };
  });
}

/** Sizes on disk of the database file and its WAL and shared-memory files (0 when absent). */
export function databaseFileSizes(path: string): FileSizes {
  const size = (p: string) => {
    try {
      return statSync(p).size;
    } catch {
      return 0;
    }
  };
  const database = size(path);
  const wal = size(`${path}-wal`);
  const shm = size(`${path}-shm`);
  return { database, wal, shm, total: database + wal + shm };
}

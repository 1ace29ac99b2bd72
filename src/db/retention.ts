import { sql } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import { releaseClientStoredBytes } from "./sqlite/client-storage.js";

/**
 * Deletes up to `batch` finished tasks completed before `before` whose events are all settled
 * (none still pending), with their events and delivery attempts (ON DELETE CASCADE); their stored
 * bytes come off their clients' (client_storage).
 * Small batches keep each write transaction short beside the live workers.
 */
export function pruneFinishedTasks(db: Db, before: number, batch: number): number {
  return db.transaction((tx) => {
    const ids = tx
      .all<{ id: string }>(sql`
        SELECT t.id FROM tasks t
        WHERE t.phase = 'done' AND t.completed_at < ${before}
          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.delivery_status = 'pending')
        LIMIT ${batch}`)
      .map((r) => r.id);
    if (ids.length === 0) return 0;
    const list = sql.join(
      ids.map((id) => sql`${id}`),
      sql`, `,
    );
    releaseClientStoredBytes(tx, ids);
    tx.run(sql`DELETE FROM delivery_attempts WHERE event_id IN (SELECT id FROM events WHERE task_id IN (${list}))`);
    tx.run(sql`DELETE FROM events WHERE task_id IN (${list})`);
    tx.run(sql`DELETE FROM tasks WHERE id IN (${list})`);
    return ids.length;
  });
}

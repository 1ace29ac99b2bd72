import { and, asc, desc, eq, type SQL } from "drizzle-orm";
import type { SupportTaskQuery } from "../store/store.js";
import type { DbOrTx } from "./sqlite/tx.js";
import type { EventRow } from "./events.js";
import { events, tasks } from "./sqlite/schema.js";
import type { TaskRow } from "../store/store.js";

/**
 * Lookups for the operator's support commands (`tasks list`, `tasks show`): across every client,
 * unlike the API's queries, which always scope to the caller.
 */

/**
 * The task with this relay id, or else the tasks with this upstream task id. Upstream ids are
 * unique per upstream account only, so more than one task can match on a relay with several.
 * (No index serves upstream_task_id alone: acceptable for a support command, not for a hot path.)
 */
export function findTasksByAnyId(db: DbOrTx, id: string): TaskRow[] {
  const byId = db.select().from(tasks).where(eq(tasks.id, id)).get();
  if (byId) return [byId];
  return db.select().from(tasks).where(eq(tasks.upstreamTaskId, id)).orderBy(asc(tasks.id)).all();
}

/** Tasks newest first (ids are time-ordered), optionally of one client and one status. */
export function listTasksForSupport(db: DbOrTx, q: SupportTaskQuery): TaskRow[] {
  const conditions: SQL[] = [];
  if (q.clientId) conditions.push(eq(tasks.clientId, q.clientId));
  if (q.status) conditions.push(eq(tasks.status, q.status));
  return db
    .select()
    .from(tasks)
    .where(conditions.length > 0 ? and(...conditions) : undefined)
    .orderBy(desc(tasks.id))
    .limit(q.limit)
    .all();
}

/** Every event of a task, in the task's order. */
export function listTaskEvents(db: DbOrTx, taskId: string): EventRow[] {
  return db.select().from(events).where(eq(events.taskId, taskId)).orderBy(asc(events.sequence)).all();
}

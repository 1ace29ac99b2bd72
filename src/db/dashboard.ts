import { and, desc, eq, getTableColumns, gte, isNotNull, lt, or, sql, type SQL } from "drizzle-orm";
import type { ListedTask, TaskListQuery } from "../store/store.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { events, tasks } from "./sqlite/schema.js";

/**
 * The dashboard's own queries: its sessions, and reads the API does not offer (search, hourly
 * counts). Every task query is scoped to one client, like the API's.
 */

import type { HourlyCount, NewSessionRow, SessionRow } from "../store/rows.js";

export type { HourlyCount, NewSessionRow, SessionRow };

// Writes use .run(), never a read of a RETURNING row: that would hide a failed commit (see db-writes.test.ts).

/**
 * An event whose delivery is retrying: pending again after an attempt that got no 2xx (a
 * redelivered event whose last answer was a 2xx is not). Plain SQL that both dialects read, so the
 * dashboard's "delivery failing" means the same on SQLite and PostgreSQL.
 */
export const retryingEvent = (e: string) =>
  `(${e}.delivery_status = 'pending' AND ${e}.attempts > 0 AND (${e}.last_status_code IS NULL OR ${e}.last_status_code NOT BETWEEN 200 AND 299))`;

/**
 * A task (table `tasks`, unaliased) with a callback whose last event failed or is retrying. Its
 * last event is one probe of events_task_seq_idx per task, so the filter walks the client's tasks
 * newest first and stops at the page's limit.
 */
export const DELIVERY_FAILING_TASK = `(tasks.callback_url IS NOT NULL AND coalesce((SELECT CASE WHEN e.delivery_status = 'failed' OR ${retryingEvent("e")} THEN 1 ELSE 0 END FROM events e WHERE e.task_id = tasks.id ORDER BY e.sequence DESC LIMIT 1), 0) = 1)`;

/** How many of the client's events are retrying (see retryingEvent). */
export function countRetryingEvents(db: DbOrTx, clientId: string): number {
  return db
    .select({ n: sql<number>`count(*)` })
    .from(events)
    .where(and(eq(events.clientId, clientId), sql.raw(retryingEvent("events"))))
    .get()!.n;
}

/**
 * Newest first. The search walks the client's metadata with json_each: no index serves it, which
 * is acceptable for a person typing into a search box, bounded by the client's own tasks.
 */
export function searchClientTasks(db: DbOrTx, q: TaskListQuery): ListedTask[] {
  const conditions: SQL[] = [eq(tasks.clientId, q.clientId)];
  if (q.beforeId) conditions.push(lt(tasks.id, q.beforeId));
  if (q.type) conditions.push(eq(tasks.type, q.type));
  if (q.status) conditions.push(eq(tasks.status, q.status));
  if (q.search) {
    conditions.push(
      or(
        eq(tasks.id, q.search),
        eq(tasks.upstreamTaskId, q.search),
        sql`exists (select 1 from json_each(${tasks.metadataJson}) where json_each.value = ${q.search})`,
      )!,
    );
  }
  if (q.deliveryFailing) conditions.push(sql.raw(DELIVERY_FAILING_TASK));
  const where = and(...conditions);
  if (q.outputMaxBytes === undefined)
    return db.select().from(tasks).where(where).orderBy(desc(tasks.id)).limit(q.limit).all();
  // octet_length reads the value's size from the record header: a large output is never loaded.
  const over = sql`coalesce(octet_length(${tasks.outputJson}) > ${q.outputMaxBytes}, 0)`;
  return db
    .select({
      ...getTableColumns(tasks),
      outputJson: sql<string | null>`CASE WHEN ${over} THEN NULL ELSE ${tasks.outputJson} END`,
      outputOmitted: over.mapWith(Boolean),
    })
    .from(tasks)
    .where(where)
    .orderBy(desc(tasks.id))
    .limit(q.limit)
    .all();
}

/** Tasks created per hour and current status, from `since` on. The clock's time, not SQL now(). */
export function hourlyTaskCounts(db: DbOrTx, clientId: string, since: number): HourlyCount[] {
  const hour = sql<number>`(${tasks.createdAt} / 3600000) * 3600000`;
  return db
    .select({ hour, status: tasks.status, n: sql<number>`count(*)` })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), gte(tasks.createdAt, since)))
    .groupBy(hour, tasks.status)
    .all();
}

/**
 * The distinct callback URLs of the client's most recent tasks: what its receivers are today.
 * Bounded to the newest `scan` tasks so the page costs the same for a client with years of history.
 */
export function recentCallbackUrls(db: DbOrTx, clientId: string, scan = 500): string[] {
  const rows = db
    .select({ url: tasks.callbackUrl })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), isNotNull(tasks.callbackUrl)))
    .orderBy(desc(tasks.id))
    .limit(scan)
    .all();
  return [...new Set(rows.map((r) => r.url!))];
}

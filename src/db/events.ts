import { and, asc, desc, eq, gt, gte, inArray, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { Db } from "./open.js";
import type { DbOrTx } from "./tx.js";
import { deliveryAttempts, events } from "./schema.js";

export type EventRow = typeof events.$inferSelect;
export type NewEventRow = typeof events.$inferInsert;
export type AttemptRow = typeof deliveryAttempts.$inferSelect;
export type NewAttemptRow = typeof deliveryAttempts.$inferInsert;

export function insertEvent(db: DbOrTx, row: NewEventRow): EventRow {
  return db.insert(events).values(row).returning().get();
}

export function findEvent(db: DbOrTx, id: string): EventRow | undefined {
  return db.select().from(events).where(eq(events.id, id)).get();
}

export function lastEventOfTask(db: DbOrTx, taskId: string): EventRow | undefined {
  return db.select().from(events).where(eq(events.taskId, taskId)).orderBy(desc(events.sequence)).limit(1).get();
}

/** The newest event of each task, for the delivery summary on task reads. */
export function lastEventsOfTasks(db: DbOrTx, taskIds: string[]): Map<string, EventRow> {
  const map = new Map<string, EventRow>();
  if (taskIds.length === 0) return map;
  const rows = db
    .select()
    .from(events)
    .where(
      and(
        inArray(events.taskId, taskIds),
        sql`${events.sequence} = (SELECT max(e2.sequence) FROM events e2 WHERE e2.task_id = ${events.taskId})`,
      ),
    )
    .all();
  for (const row of rows) map.set(row.taskId, row);
  return map;
}

/**
 * Claims pending events that are due, one UPDATE … RETURNING under a lease. An event waits while an
 * earlier event of the same task is still pending, which keeps each task's events in order.
 */
export function claimDueEvents(db: Db, opts: { now: number; leaseMs: number; token: string; limit: number; excludeHosts?: string[] }): EventRow[] {
  if (opts.limit <= 0) return [];
  const due = db
    .select({ seq: events.seq })
    .from(events)
    .where(
      and(
        eq(events.deliveryStatus, "pending"),
        lte(events.nextAttemptAt, opts.now),
        or(isNull(events.claimedUntil), lt(events.claimedUntil, opts.now)),
        sql`NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = ${events.taskId} AND e2.sequence < ${events.sequence} AND e2.delivery_status = 'pending')`,
      ),
    )
    .orderBy(asc(events.nextAttemptAt), asc(events.seq))
    .limit(opts.limit);
  return db
    .update(events)
    .set({ claimedUntil: opts.now + opts.leaseMs, claimToken: opts.token })
    .where(inArray(events.seq, due))
    .returning()
    .all();
}

export function nextEventDueAt(db: Db): number | null {
  const row = db
    .select({ at: sql<number | null>`min(max(coalesce(${events.claimedUntil}, 0), ${events.nextAttemptAt}))` })
    .from(events)
    .where(eq(events.deliveryStatus, "pending"))
    .get();
  return row?.at ?? null;
}

export function updateLeasedEvent(db: DbOrTx, id: string, token: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db
    .update(events)
    .set(patch)
    .where(and(eq(events.id, id), eq(events.claimToken, token)))
    .returning()
    .get();
}

export function updateEvent(db: DbOrTx, id: string, patch: Partial<NewEventRow>): EventRow | undefined {
  return db.update(events).set(patch).where(eq(events.id, id)).returning().get();
}

export function insertAttempt(db: DbOrTx, row: NewAttemptRow): AttemptRow {
  return db.insert(deliveryAttempts).values(row).returning().get();
}

export function listTaskAttempts(db: DbOrTx, taskId: string): AttemptRow[] {
  return db
    .select()
    .from(deliveryAttempts)
    .where(eq(deliveryAttempts.taskId, taskId))
    .orderBy(asc(deliveryAttempts.attemptedAt), asc(deliveryAttempts.id))
    .all();
}

/** The pull feed: a client's events after a feed position, in order. */
export function listClientEvents(db: DbOrTx, clientId: string, afterSeq: number, limit: number): EventRow[] {
  return db
    .select()
    .from(events)
    .where(and(eq(events.clientId, clientId), gt(events.seq, afterSeq)))
    .orderBy(asc(events.seq))
    .limit(limit)
    .all();
}

/** Re-queues a client's failed deliveries created since a time; returns how many. */
export function requeueFailedEvents(db: DbOrTx, clientId: string, since: number, now: number): number {
  return db
    .update(events)
    .set({ deliveryStatus: "pending", roundAttempts: 0, nextAttemptAt: now, failedAt: null, claimedUntil: null, claimToken: null })
    .where(and(eq(events.clientId, clientId), eq(events.deliveryStatus, "failed"), gte(events.createdAt, since)))
    .run().changes;
}

export function releaseEventLeases(db: Db, ownerPrefix: string): number {
  return db
    .update(events)
    .set({ claimedUntil: null, claimToken: null })
    .where(sql`${events.claimToken} LIKE ${ownerPrefix + ":%"}`)
    .run().changes;
}

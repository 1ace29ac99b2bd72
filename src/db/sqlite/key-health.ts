import { and, asc, eq, isNotNull, isNull, lte, sql } from "drizzle-orm";
import type { DeliveryKey, KeyHealthStore } from "../../store/store.js";
import type { KeyHealthRow } from "../../store/rows.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { clients, endpointHealth } from "./schema.js";

/**
 * The KeyHealthStore on SQLite: the health of delivery keys. An attempt's health change is
 * written in the attempts' group commit (one statement each, so atomic without a savepoint),
 * queued right after the attempt's record and kept with it (withPrevious): it shares the record's
 * transaction and fsync, never a commit of its own, whatever the turn's budget cuts.
 */
export function sqliteKeyHealth(s: SqliteContext): KeyHealthStore {
  const db = s.database.db;
  const withRecord = { withPrevious: true };
  return {
    recordFailure: (key, now, error) =>
      s.attemptCommits.runAtomic(() => recordFailure(db, key, now, error), withRecord),
    recordSuccess: (key, now) => s.attemptCommits.runAtomic(() => recordSuccess(db, key, now), withRecord),
    dueForNotice: async (before, limit) => dueForNotice(db, before, limit),
    markNoticed: async (key, failingSince, at) => markNoticed(db, key, failingSince, at),
    failingOf: async (clientId) => failingOf(db, clientId),
  };
}

const ofKey = (k: DeliveryKey) => and(eq(endpointHealth.clientId, k.clientId), eq(endpointHealth.host, k.host));

export function recordFailure(db: Db, key: DeliveryKey, now: number, error: string | null): void {
  db.insert(endpointHealth)
    .values({
      clientId: key.clientId,
      host: key.host,
      failingSince: now,
      failedAttempts: 1,
      lastError: error,
      updatedAt: now,
    })
    .onConflictDoUpdate({
      target: [endpointHealth.clientId, endpointHealth.host],
      set: {
        failingSince: sql`coalesce(${endpointHealth.failingSince}, ${now})`,
        failedAttempts: sql`${endpointHealth.failedAttempts} + 1`,
        lastError: error,
        updatedAt: now,
      },
    })
    .run();
}

/**
 * Ends the key's failing run, if one is open; what it was. A read, then one UPDATE: run inside a
 * transaction (the group commit's), nothing can change the row in between.
 */
export function recordSuccess(
  db: Db,
  key: DeliveryKey,
  now: number,
): { failingSince: number; noticeSentAt: number | null } | null {
  const open = db
    .select({ failingSince: endpointHealth.failingSince, noticeSentAt: endpointHealth.noticeSentAt })
    .from(endpointHealth)
    .where(and(ofKey(key), isNotNull(endpointHealth.failingSince)))
    .all()[0];
  if (!open) return null;
  db.update(endpointHealth)
    .set({ failingSince: null, failedAttempts: 0, noticeSentAt: null, lastSuccessAt: now, updatedAt: now })
    .where(ofKey(key))
    .run();
  return { failingSince: open.failingSince!, noticeSentAt: open.noticeSentAt };
}

/** Only clients with a notification_url: the others have no one to tell (and are never marked). */
export function dueForNotice(db: Db, before: number, limit: number): KeyHealthRow[] {
  return db
    .select({ row: endpointHealth })
    .from(endpointHealth)
    .innerJoin(clients, eq(clients.id, endpointHealth.clientId))
    .where(
      and(
        lte(endpointHealth.failingSince, before),
        isNull(endpointHealth.noticeSentAt),
        isNotNull(clients.notificationUrl),
        isNull(clients.revokedAt),
      ),
    )
    .orderBy(asc(endpointHealth.failingSince))
    .limit(limit)
    .all()
    .map((r) => r.row);
}

export function markNoticed(db: Db, key: DeliveryKey, failingSince: number, at: number): boolean {
  return (
    db
      .update(endpointHealth)
      .set({ noticeSentAt: at })
      .where(and(ofKey(key), eq(endpointHealth.failingSince, failingSince), isNull(endpointHealth.noticeSentAt)))
      .run().changes > 0
  );
}

export function failingOf(db: Db, clientId: string): KeyHealthRow[] {
  return db
    .select()
    .from(endpointHealth)
    .where(and(eq(endpointHealth.clientId, clientId), isNotNull(endpointHealth.failingSince)))
    .orderBy(asc(endpointHealth.failingSince))
    .all();
}

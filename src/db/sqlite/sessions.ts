import { and, eq, isNotNull, isNull, lt, or } from "drizzle-orm";
import type { SessionStore } from "../../store/store.js";
import type { NewSessionRow, SessionRow } from "../../store/rows.js";
import type { SqliteContext } from "./context.js";
import { dashboardSessions } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/** The SessionStore on SQLite: dashboard sessions. */
export function sqliteSessions(s: SqliteContext): SessionStore {
  const db = s.database.db;
  return {
    open: async (row, now) => open(db, row, now),
    find: async (hash) => find(db, hash),
    touch: async (hash, now) => touch(db, hash, now),
    revoke: async (hash, now) => revoke(db, hash, now),
  };
}

/** Sign-in: ended sessions go first, then the new one, in one transaction. */
export function open(db: DbOrTx, row: NewSessionRow, now: number): void {
  db.transaction((tx) => {
    deleteEndedSessions(tx, now);
    insertSession(tx, row);
  });
}

function insertSession(db: DbOrTx, row: NewSessionRow): void {
  db.insert(dashboardSessions).values(row).run();
}

export function find(db: DbOrTx, tokenHash: string): SessionRow | undefined {
  return db.select().from(dashboardSessions).where(eq(dashboardSessions.tokenHash, tokenHash)).get();
}

export function touch(db: DbOrTx, tokenHash: string, now: number): void {
  db.update(dashboardSessions).set({ lastSeenAt: now }).where(eq(dashboardSessions.tokenHash, tokenHash)).run();
}

export function revoke(db: DbOrTx, tokenHash: string, now: number): void {
  db.update(dashboardSessions)
    .set({ revokedAt: now })
    .where(and(eq(dashboardSessions.tokenHash, tokenHash), isNull(dashboardSessions.revokedAt)))
    .run();
}

/** Sessions past their end are useless; sign-in deletes them so the table does not grow forever. */
function deleteEndedSessions(db: DbOrTx, now: number): number {
  return db
    .delete(dashboardSessions)
    .where(or(lt(dashboardSessions.expiresAt, now), isNotNull(dashboardSessions.revokedAt)))
    .run().changes;
}

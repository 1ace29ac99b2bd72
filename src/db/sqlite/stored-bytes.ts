import { eq, sql } from "drizzle-orm";
import type { Db } from "./open.js";
import { prepared } from "./prepared.js";
import { clientStorage } from "./schema.js";

/**
 * Each client's stored bytes on SQLite (client_storage; docs/contract.md, "Bounded requests"): one row per client, read and
 * counted up by intake inside the group commit's transaction (one writer: what it reads is what
 * the next creation sees); everything written for the client afterwards (event rows, attempts,
 * outputs) and every delete is counted by triggers (migrations/0011_stored_bytes_triggers.sql).
 * Prepared once: intake's hot path.
 */
export function storedBytesOfClient(db: Db, clientId: string): number {
  const row = prepared(db, "clientStorage.read", () =>
    db
      .select({ n: clientStorage.storedBytes })
      .from(clientStorage)
      .where(eq(clientStorage.clientId, sql.placeholder("clientId")))
      .prepare(),
  ).get({ clientId });
  return row?.n ?? 0;
}

/** Adds a created task's bytes to its client's (the row is made with the client's first task). */
export function addClientStoredBytes(db: Db, clientId: string, bytes: number): void {
  prepared(db, "clientStorage.add", () =>
    db
      .insert(clientStorage)
      .values({ clientId: sql.placeholder("clientId"), storedBytes: sql.placeholder("bytes") })
      .onConflictDoUpdate({
        target: clientStorage.clientId,
        set: { storedBytes: sql`${clientStorage.storedBytes} + excluded.stored_bytes` },
      })
      .prepare(),
  ).run({ clientId, bytes });
}

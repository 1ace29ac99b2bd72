import { eq, sql } from "drizzle-orm";
import type { Gatherer } from "./group-commit.js";
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

/**
 * Intake's stored bytes in one transaction of the intake commit: each client's count read at its
 * first creation of the transaction, what its creations add kept here, and written by one upsert
 * per client as the transaction closes (storedBytesTally's seal, before COMMIT). One connection
 * writes and the transaction holds the write lock, so what a creation reads (`of`) is the count
 * plus every creation before it, exactly as when each wrote its own upsert; the sum commits or
 * rolls back with the rows it counts.
 */
export class StoredBytesTally {
  private readonly read = new Map<string, number>();
  private readonly added = new Map<string, number>();

  constructor(private readonly db: Db) {}

  /** The client's stored bytes as they stand in this transaction. */
  of(clientId: string): number {
    let base = this.read.get(clientId);
    if (base === undefined) {
      base = storedBytesOfClient(this.db, clientId);
      this.read.set(clientId, base);
    }
    return base + (this.added.get(clientId) ?? 0);
  }

  /** A created task's bytes: call once its rows are written (a unit that throws after it would leave them counted). */
  add(clientId: string, bytes: number): void {
    this.added.set(clientId, (this.added.get(clientId) ?? 0) + bytes);
  }

  /** One upsert per client with bytes added (the row is made with the client's first task). */
  write(): void {
    for (const [clientId, bytes] of this.added) addClientStoredBytes(this.db, clientId, bytes);
  }
}

/** The intake commit's gatherer of StoredBytesTally (GroupCommit.gathered): one per transaction, written before its COMMIT. */
export function storedBytesTally(db: Db): Gatherer<StoredBytesTally> {
  return { open: () => new StoredBytesTally(db), seal: (_tx, tally) => tally.write() };
}

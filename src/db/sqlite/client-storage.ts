import { eq, sql } from "drizzle-orm";
import type { Db } from "./open.js";
import { prepared } from "./prepared.js";
import { clientStorage } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/**
 * Each client's stored bytes on SQLite (client_storage; docs/contract.md, "Bounded requests"): one row per client, read and
 * counted up by intake inside the group commit's transaction (one writer: what it reads is what
 * the next creation sees), counted down by retention as it prunes. Prepared once: intake's hot path.
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

/** Takes the stored bytes of the tasks about to be deleted (`ids`) off their clients' rows. */
export function releaseClientStoredBytes(tx: DbOrTx, ids: string[]): void {
  if (ids.length === 0) return;
  const list = sql.join(
    ids.map((id) => sql`${id}`),
    sql`, `,
  );
  tx.run(sql`
    UPDATE client_storage SET stored_bytes = stored_bytes - (
      SELECT coalesce(sum(t.stored_bytes), 0) FROM tasks t WHERE t.id IN (${list}) AND t.client_id = client_storage.client_id)
    WHERE client_id IN (SELECT client_id FROM tasks WHERE id IN (${list}))`);
}

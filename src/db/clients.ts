import { asc, eq, sql } from "drizzle-orm";
import type { Db } from "./sqlite/open.js";
import type { DbOrTx } from "./sqlite/tx.js";
import { clients } from "./sqlite/schema.js";

import type { ClientRow, NewClientRow } from "../store/rows.js";

export type { ClientRow, NewClientRow };

export function insertClient(db: Db, row: NewClientRow): ClientRow {
  return db.insert(clients).values(row).returning().all()[0]!;
}

/** Every authenticated request runs this, so it is prepared once per database. */
const byKeyHash = new WeakMap<Db, { get(p: Record<string, unknown>): ClientRow | undefined }>();

export function findClientByKeyHash(db: Db, apiKeyHash: string): ClientRow | undefined {
  let statement = byKeyHash.get(db);
  if (!statement) {
    statement = db
      .select()
      .from(clients)
      .where(eq(clients.apiKeyHash, sql.placeholder("hash")))
      .prepare();
    byKeyHash.set(db, statement);
  }
  return statement.get({ hash: apiKeyHash });
}

export function findClient(db: DbOrTx, id: string): ClientRow | undefined {
  return db.select().from(clients).where(eq(clients.id, id)).get();
}

export function listClients(db: Db): ClientRow[] {
  return db.select().from(clients).orderBy(asc(clients.id)).all();
}

export function updateClient(db: DbOrTx, id: string, patch: Partial<NewClientRow>): ClientRow | undefined {
  // drizzle refuses an UPDATE that sets nothing: an empty patch changes nothing and answers the row.
  if (Object.values(patch).every((v) => v === undefined)) return findClient(db, id);
  return db.update(clients).set(patch).where(eq(clients.id, id)).returning().all()[0];
}

/** Round-robin admission: the client's task was just submitted. */
export function markAdmitted(db: Db, id: string, at: number): void {
  db.update(clients).set({ lastAdmittedAt: at }).where(eq(clients.id, id)).run();
}

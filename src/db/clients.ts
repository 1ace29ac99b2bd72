import { asc, eq, sql } from "drizzle-orm";
import type { Db } from "./open.js";
import { clients } from "./schema.js";

export type ClientRow = typeof clients.$inferSelect;
export type NewClientRow = typeof clients.$inferInsert;

export function insertClient(db: Db, row: NewClientRow): ClientRow {
  return db.insert(clients).values(row).returning().get();
}

/** Every authenticated request runs this, so it is prepared once per database. */
const byKeyHash = new WeakMap<Db, { get(p: Record<string, unknown>): ClientRow | undefined }>();

export function findClientByKeyHash(db: Db, apiKeyHash: string): ClientRow | undefined {
  let statement = byKeyHash.get(db);
  if (!statement) {
    statement = db.select().from(clients).where(eq(clients.apiKeyHash, sql.placeholder("hash"))).prepare();
    byKeyHash.set(db, statement);
  }
  return statement.get({ hash: apiKeyHash });
}

export function findClient(db: Db, id: string): ClientRow | undefined {
  return db.select().from(clients).where(eq(clients.id, id)).get();
}

export function listClients(db: Db): ClientRow[] {
  return db.select().from(clients).orderBy(asc(clients.id)).all();
}

export function updateClient(db: Db, id: string, patch: Partial<NewClientRow>): ClientRow | undefined {
  return db.update(clients).set(patch).where(eq(clients.id, id)).returning().get();
}

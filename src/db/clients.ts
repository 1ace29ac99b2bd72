import { asc, eq } from "drizzle-orm";
import type { Db } from "./open.js";
import { clients } from "./schema.js";

export type ClientRow = typeof clients.$inferSelect;
export type NewClientRow = typeof clients.$inferInsert;

export function insertClient(db: Db, row: NewClientRow): ClientRow {
  return db.insert(clients).values(row).returning().get();
}

export function findClientByKeyHash(db: Db, apiKeyHash: string): ClientRow | undefined {
  return db.select().from(clients).where(eq(clients.apiKeyHash, apiKeyHash)).get();
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

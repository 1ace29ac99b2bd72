import { asc, eq, sql } from "drizzle-orm";
import type { ClientRow, ClientStore, LedgerEntry, NewClientRow } from "../../store/store.js";
import { creditPosition } from "../credits.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { clients, creditLedger } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/** The ClientStore on SQLite: clients and their credit books. */
export function sqliteClients(s: SqliteContext): ClientStore {
  const db = s.database.db;
  return {
    insert: async (row) => insert(db, row),
    find: async (id) => find(db, id),
    findByKeyHash: async (hash) => findByKeyHash(db, hash),
    list: async () => list(db),
    update: async (id, patch) => update(db, id, patch),
    updateWith: async (id, change) =>
      db.transaction((tx) => {
        const client = find(tx, id);
        if (!client) return undefined;
        const { patch, result } = change(client);
        return { client: Object.keys(patch).length === 0 ? client : update(tx, id, patch)!, result };
      }),
    // Once per submission: in the workers' group commit (one statement).
    markAdmitted: (id, at) => s.attemptCommits.runAtomic(() => markAdmitted(db, id, at)),
    creditPosition: async (id) => creditPosition(db, id),
    ledger: async (id) => ledger(db, id),
  };
}

export function insert(db: Db, row: NewClientRow): ClientRow {
  return db.insert(clients).values(row).returning().all()[0]!;
}

/** Every authenticated request runs this, so it is prepared once per database. */
const byKeyHash = new WeakMap<Db, { get(p: Record<string, unknown>): ClientRow | undefined }>();

export function findByKeyHash(db: Db, apiKeyHash: string): ClientRow | undefined {
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

export function find(db: DbOrTx, id: string): ClientRow | undefined {
  return db.select().from(clients).where(eq(clients.id, id)).get();
}

export function list(db: Db): ClientRow[] {
  return db.select().from(clients).orderBy(asc(clients.id)).all();
}

export function update(db: DbOrTx, id: string, patch: Partial<NewClientRow>): ClientRow | undefined {
  // drizzle refuses an UPDATE that sets nothing: an empty patch changes nothing and answers the row.
  if (Object.values(patch).every((v) => v === undefined)) return find(db, id);
  return db.update(clients).set(patch).where(eq(clients.id, id)).returning().all()[0];
}

/** Round-robin admission: the client's task was just submitted. */
export function markAdmitted(db: Db, id: string, at: number): void {
  db.update(clients).set({ lastAdmittedAt: at }).where(eq(clients.id, id)).run();
}

export function ledger(db: DbOrTx, clientId: string): LedgerEntry[] {
  return db
    .select({
      taskId: creditLedger.taskId,
      charged: creditLedger.charged,
      refunded: creditLedger.refunded,
      at: creditLedger.at,
    })
    .from(creditLedger)
    .where(eq(creditLedger.clientId, clientId))
    .orderBy(creditLedger.id)
    .all();
}

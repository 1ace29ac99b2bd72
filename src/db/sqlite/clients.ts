import type { ClientStore } from "../../store/store.js";
import { findClient, findClientByKeyHash, insertClient, listClients, markAdmitted, updateClient } from "../clients.js";
import { creditPosition, ledgerOf } from "../credits.js";
import type { SqliteContext } from "./context.js";

/** The ClientStore on SQLite: clients and their credit books. */
export function sqliteClients(s: SqliteContext): ClientStore {
  const db = s.database.db;
  return {
    insert: async (row) => insertClient(db, row),
    find: async (id) => findClient(db, id),
    findByKeyHash: async (hash) => findClientByKeyHash(db, hash),
    list: async () => listClients(db),
    update: async (id, patch) => updateClient(db, id, patch),
    updateWith: async (id, change) =>
      db.transaction((tx) => {
        const client = findClient(tx, id);
        if (!client) return undefined;
        const { patch, result } = change(client);
        return { client: Object.keys(patch).length === 0 ? client : updateClient(tx, id, patch)!, result };
      }),
    // Once per submission: in the workers' group commit (one statement).
    markAdmitted: (id, at) => s.attemptCommits.runAtomic(() => markAdmitted(db, id, at)),
    creditPosition: async (id) => creditPosition(db, id),
    ledger: async (id) => ledgerOf(db, id),
  };
}

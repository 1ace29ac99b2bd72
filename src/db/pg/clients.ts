import type { ClientStore } from "../../store/store.js";
import { CLIENT_CHANGED, ClientChanges } from "../kit/client-changes.js";
import { C, CHANNEL, opt, type Queryable } from "./mapping.js";
import type { PgContext } from "./context.js";
import { ADMITTED_GRANULARITY_MS, admissionMarks } from "../kit/task-claims.js";

/** The ClientStore on PostgreSQL: clients and their credit books. */
export function pgClients(s: PgContext, changes = new ClientChanges()): ClientStore {
  const { q, one } = s;
  // Other processes hear of a change at commit (their listener: PgStore.listen), this one at once.
  const notify = (id: string, on: Queryable = s.pool) =>
    q("SELECT pg_notify($1, $2)", [CHANNEL, `${CLIENT_CHANGED}${id}`], on);
  const mustMark = admissionMarks();
  return {
    insert: async (row) => {
      const ins = C.insert("clients", row);
      return C.row((await one(`${ins.sql} RETURNING *`, ins.values))!);
    },
    find: async (id) => opt(C, await one("SELECT * FROM clients WHERE id = $1", [id])),
    findByKeyHash: async (hash) => opt(C, await one("SELECT * FROM clients WHERE api_key_hash = $1", [hash])),
    list: async () => C.rows(await q("SELECT * FROM clients ORDER BY id")),
    update: async (id, patch) => {
      const set = C.set(patch, 2);
      if (!set.sql) return opt(C, await one("SELECT * FROM clients WHERE id = $1", [id]));
      const client = opt(C, await one(`UPDATE clients SET ${set.sql} WHERE id = $1 RETURNING *`, [id, ...set.values]));
      if (client) {
        changes.emit(id);
        await notify(id);
      }
      return client;
    },
    updateWith: async (id, change) => {
      const changed = await s.tx(async (c) => {
        const raw = await one("SELECT * FROM clients WHERE id = $1 FOR UPDATE", [id], c);
        if (!raw) return undefined;
        const client = C.row(raw);
        const { patch, result } = change(client);
        const set = C.set(patch, 2);
        if (!set.sql) return { client, result };
        await notify(id, c);
        return {
          client: C.row(
            (await one(`UPDATE clients SET ${set.sql} WHERE id = $1 RETURNING *`, [id, ...set.values], c))!,
          ),
          result,
        };
      });
      if (changed) changes.emit(id);
      return changed;
    },
    watch: (changed) => changes.watch(changed),
    pollChanges: () => {},
    // At most one write per client per ADMITTED_GRANULARITY_MS (db/kit/task-claims.ts), not one per
    // admission; within one, this process does not even ask (the statement's condition holds across processes).
    markAdmitted: async (id, at) => {
      if (!mustMark(id, at)) return;
      await s.pool.query(
        "UPDATE clients SET last_admitted_at = $2 WHERE id = $1 AND (last_admitted_at > $2 OR last_admitted_at <= $2 - $3)",
        [id, at, ADMITTED_GRANULARITY_MS],
      );
    },
    creditPosition: (id) => s.creditPositionIn(s.pool, id, false),
    ledger: async (id) =>
      (await q("SELECT task_id, charged, refunded, at FROM credit_ledger WHERE client_id = $1 ORDER BY id", [id])).map(
        (r) => ({
          taskId: r.task_id as string,
          charged: Number(r.charged),
          refunded: Number(r.refunded),
          at: Number(r.at),
        }),
      ),
  };
}

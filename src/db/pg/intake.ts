import { getTableColumns } from "drizzle-orm";
import type { CreateResult, NewTaskRequest } from "../../store/store.js";
import { tasks } from "./schema.js";
import { CHANNEL, T, columnsOf } from "./mapping.js";
import { loggedBytesOf } from "./storage-log.js";

/** What a creation needs from the driver: one statement, and the per-request path for what a batch cannot take. */
export interface IntakePort {
  q(sql: string, values: unknown[]): Promise<Record<string, unknown>[]>;
  single(req: NewTaskRequest): Promise<CreateResult>;
}

interface Pending {
  req: NewTaskRequest;
  resolve: (result: CreateResult) => void;
  reject: (err: unknown) => void;
}

/** Every column an insert binds, with the defaults the schema gives an absent one. */
const COLUMNS = columnsOf(tasks);
const DEFAULTS: Record<string, unknown> = Object.fromEntries(
  Object.entries(getTableColumns(tasks))
    .filter(([, col]) => col.hasDefault && col.default !== undefined && typeof col.default !== "object")
    .map(([key, col]) => [key, col.default]),
);
/** Rows per statement: 256 rows of every column stay far below PostgreSQL's 65,535 parameters. */
const MAX_BATCH = 256;

/**
 * Group commit for PostgreSQL intake: creations that need no decision against the client's other
 * tasks (no waiting cap, no credit limit) and arrive in the same turn of the event loop are written
 * by one multi-row `INSERT … ON CONFLICT DO NOTHING` (one round trip and one durable commit for the
 * batch, where a creation of its own takes a transaction of several). A row the insert skipped is
 * an idempotent replay, answered with the original. If the statement fails (a hostile value in one
 * row refuses the whole statement), each creation of the batch is tried alone, so it fails alone.
 * Creations with a cap or a credit limit take the per-request path, under the client's credit lock (credit-books.ts).
 *
 * The same statement adds the rows' stored bytes to their clients' (client_storage: one row write
 * per client per batch, not per task) and fails, so writes nothing, when a client would be over its
 * storage bound: each creation of the batch is then decided alone, under that row's lock, so a
 * burst stops exactly at the bound. One statement, its own transaction: the client_storage row,
 * which every batch of the client's creations on every instance updates, is locked for that
 * statement and its commit only (no BEGIN and COMMIT round trips while it is held).
 */
export class PgIntakeBatches {
  private queue: Pending[] = [];

  constructor(private readonly port: IntakePort) {}

  create(req: NewTaskRequest): Promise<CreateResult> {
    if (req.needs.waiting || req.needs.credit) return this.port.single(req);
    return new Promise((resolve, reject) => {
      this.queue.push({ req, resolve, reject });
      if (this.queue.length >= MAX_BATCH) void this.flush();
      else if (this.queue.length === 1) setImmediate(() => void this.flush());
    });
  }

  private async flush(): Promise<void> {
    const batch = this.queue.splice(0, MAX_BATCH);
    if (batch.length === 0) return;
    const admitted: Pending[] = [];
    for (const item of batch) {
      try {
        // No cap and no credit limit: nothing to decide but the reservation, which is none.
        if (item.req.admit({ waiting: 0, position: undefined, learnedPrice: null }) !== 0)
          throw new Error("a creation without a credit limit reserved points");
        admitted.push(item);
      } catch (err) {
        item.reject(err);
      }
    }
    if (admitted.length === 0) return;
    let inserted: Map<string, Record<string, unknown>>;
    try {
      inserted = await this.insert(admitted.map((p) => p.req));
    } catch {
      for (const item of admitted) this.port.single(item.req).then(item.resolve, item.reject);
      return;
    }
    const replays: Pending[] = [];
    for (const item of admitted) {
      const row = inserted.get(item.req.row.id);
      if (row) item.resolve({ task: T.row(row), replayed: false });
      else replays.push(item);
    }
    // Skipped by ON CONFLICT: another creation with the same key committed first (or earlier in this batch).
    if (replays.length > 0) {
      try {
        const originals = await this.port.q(
          "SELECT t.* FROM tasks t JOIN unnest($1::text[], $2::text[]) AS k(client_id, key) ON t.client_id = k.client_id AND t.idempotency_key = k.key",
          [replays.map((p) => p.req.row.clientId), replays.map((p) => p.req.row.idempotencyKey)],
        );
        const byKey = new Map(originals.map((r) => [`${r.client_id as string}\n${r.idempotency_key as string}`, r]));
        for (const item of replays) {
          const original = byKey.get(`${item.req.row.clientId}\n${item.req.row.idempotencyKey}`);
          if (original) item.resolve({ task: T.row(original), replayed: true });
          else this.port.single(item.req).then(item.resolve, item.reject);
        }
      } catch (err) {
        for (const item of replays) item.reject(err);
      }
    }
    if (inserted.size > 0) void this.port.q("SELECT pg_notify($1, 'submitter')", [CHANNEL]).catch(() => {});
  }

  /**
   * One multi-row INSERT, with its rows' stored bytes counted onto their clients in the same
   * statement (rows skipped as replays count nothing); the rows it wrote, by task id. Throws, having
   * written nothing, when a client's total would pass its bound: the statement's last step casts a
   * text that is no number for such a row, only then (a column of the row, so never folded early).
   */
  private async insert(reqs: NewTaskRequest[]): Promise<Map<string, Record<string, unknown>>> {
    const values: unknown[] = [];
    const bounds = new Map<string, number>();
    const tuples = reqs.map((req) => {
      const row = { ...req.row, pointsReserved: 0 } as Record<string, unknown>;
      const limit = req.storedBytesLimit;
      if (limit !== null && limit !== undefined)
        bounds.set(req.row.clientId, Math.min(limit, bounds.get(req.row.clientId) ?? Infinity));
      const params = COLUMNS.map(([key]) => {
        values.push(row[key] ?? DEFAULTS[key] ?? null);
        return `$${values.length}`;
      });
      return `(${params.join(", ")})`;
    });
    values.push([...bounds.keys()], [...bounds.values()]);
    const rows = await this.port.q(
      `WITH ins AS (
         INSERT INTO tasks (${COLUMNS.map(([, name]) => name).join(", ")}) VALUES ${tuples.join(", ")}
         ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING *
       ), counted AS (
         INSERT INTO client_storage (client_id, stored_bytes)
         SELECT client_id, sum(stored_bytes) FROM ins GROUP BY client_id ORDER BY client_id
         ON CONFLICT (client_id) DO UPDATE SET stored_bytes = client_storage.stored_bytes + excluded.stored_bytes
         RETURNING client_id, stored_bytes + ${loggedBytesOf("client_storage.client_id")} AS client_stored_bytes
       ), bound AS (
         SELECT * FROM unnest($${values.length - 1}::text[], $${values.length}::bigint[]) AS b(client_id, max_bytes)
       )
       SELECT ins.*, counted.client_stored_bytes,
              CASE WHEN counted.client_stored_bytes > bound.max_bytes THEN ('over the storage bound: ' || ins.client_id)::bigint END AS over_bound
       FROM ins JOIN counted USING (client_id) LEFT JOIN bound USING (client_id)`,
      values,
    );
    return new Map(rows.map((r) => [r.id as string, r]));
  }
}

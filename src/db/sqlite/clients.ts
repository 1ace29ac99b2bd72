import { and, asc, eq, gt, lte, or, sql } from "drizzle-orm";
import type { ClientStore, CreditChange, CreditPosition, LedgerEntry, ReservationsAround } from "../../store/store.js";
import type { ClientRow, NewClientRow } from "../../store/rows.js";
import { ClientChanges } from "../kit/client-changes.js";
import { ADMITTED_GRANULARITY_MS, admissionMarks } from "../kit/task-claims.js";
import type { SqliteContext } from "./context.js";
import type { Db } from "./open.js";
import { prepared, statement } from "./prepared.js";
import { clients, creditLedger, learnedPrices, tasks } from "./schema.js";
import type { DbOrTx } from "./tx.js";

/** How often, at most, ClientStore.pollChanges reads PRAGMA data_version. */
const POLL_MS = 2;

/** The ClientStore on SQLite: clients and their credit books (with the learned prices the books are kept by). */
export function sqliteClients(s: SqliteContext): ClientStore {
  const db = s.database.db;
  const changes = new ClientChanges();
  const mustMark = admissionMarks();
  // Changes by other connections (the CLI beside the server): SQLite bumps this number for each of
  // their commits, never for this connection's own. Reading it costs 5-8 µs, so it is read at most
  // once per POLL_MS: far less than any other process takes to open the file and commit.
  const dataVersion = s.database.sqlite.prepare("PRAGMA data_version").pluck();
  const version = () => dataVersion.get() as number;
  let seen = version();
  let polledAt = performance.now();
  return {
    insert: async (row) => insert(db, row),
    // Once per delivery refill and per claimed client: prepared once, not built by drizzle per call.
    find: async (id) => findPrepared(db, id),
    findByKeyHash: async (hash) => findByKeyHash(db, hash),
    list: async () => list(db),
    update: async (id, patch) => {
      const client = update(db, id, patch);
      if (client) changes.emit(id);
      return client;
    },
    updateWith: async (id, change) => {
      const changed = db.transaction((tx) => {
        const client = find(tx, id);
        if (!client) return undefined;
        const { patch, result } = change(client);
        return { client: Object.keys(patch).length === 0 ? client : update(tx, id, patch)!, result };
      });
      if (changed) changes.emit(id);
      return changed;
    },
    watch: (changed) => changes.watch(changed),
    pollChanges: () => {
      const at = performance.now();
      if (at - polledAt < POLL_MS) return;
      polledAt = at;
      const now = version();
      if (now === seen) return;
      seen = now;
      changes.emit(null);
    },
    // At most one write per client per ADMITTED_GRANULARITY_MS (db/kit/task-claims.ts), as on
    // PostgreSQL: within one, this process does not even ask (the statement's condition holds across
    // processes). Then in the workers' group commit (one statement).
    markAdmitted: async (id, at) => {
      if (mustMark(id, at)) await s.attemptCommits.runAtomic(() => markAdmitted(db, id, at));
    },
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

const byId = new WeakMap<Db, { get(p: Record<string, unknown>): ClientRow | undefined }>();

function findPrepared(db: Db, id: string): ClientRow | undefined {
  let statement = byId.get(db);
  if (!statement) {
    statement = db
      .select()
      .from(clients)
      .where(eq(clients.id, sql.placeholder("id")))
      .prepare();
    byId.set(db, statement);
  }
  return statement.get({ id });
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

/** Round-robin admission: the client's task was just submitted (written at most once per ADMITTED_GRANULARITY_MS). */
export function markAdmitted(db: Db, id: string, at: number): void {
  prepared(db, "clients.markAdmitted", () =>
    db
      .update(clients)
      .set({ lastAdmittedAt: sql`${sql.placeholder("at")}` })
      .where(
        and(
          eq(clients.id, sql.placeholder("id")),
          or(
            gt(clients.lastAdmittedAt, sql.placeholder("at")),
            lte(clients.lastAdmittedAt, sql`${sql.placeholder("at")} - ${ADMITTED_GRANULARITY_MS}`),
          ),
        ),
      )
      .prepare(),
  ).run({ id, at });
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

export function creditPosition(db: Db, clientId: string): CreditPosition | undefined {
  const row = prepared(db, "clients.creditPosition", () =>
    db
      .select({
        charged: clients.pointsCharged,
        refunded: clients.pointsRefunded,
        reserved: clients.pointsReserved,
        limit: clients.creditLimit,
        revokedAt: clients.revokedAt,
      })
      .from(clients)
      .where(eq(clients.id, sql.placeholder("clientId")))
      .prepare(),
  ).get({ clientId });
  if (!row) return undefined;
  return {
    charged: row.charged,
    refunded: row.refunded,
    reserved: row.reserved,
    limit: row.limit,
    revoked: row.revokedAt !== null,
  };
}

/**
 * Applies a task's change of charge, refund and reservation to its client's totals, and appends
 * charges and refunds to the ledger. Runs in the transaction that changes the task.
 */
export function applyCreditChange(db: Db, clientId: string, taskId: string, change: CreditChange, at: number): void {
  if (change.charged === 0 && change.refunded === 0 && change.reserved === 0) return;
  prepared(db, "clients.creditChange", () =>
    db
      .update(clients)
      .set({
        pointsCharged: sql`${clients.pointsCharged} + ${sql.placeholder("charged")}`,
        pointsRefunded: sql`${clients.pointsRefunded} + ${sql.placeholder("refunded")}`,
        pointsReserved: sql`max(0, ${clients.pointsReserved} + ${sql.placeholder("reserved")})`,
      })
      .where(eq(clients.id, sql.placeholder("clientId")))
      .prepare(),
  ).run({ clientId, charged: change.charged, refunded: change.refunded, reserved: change.reserved });
  if (change.charged !== 0 || change.refunded !== 0) {
    prepared(db, "clients.ledgerEntry", () =>
      db
        .insert(creditLedger)
        .values({
          clientId: sql.placeholder("clientId"),
          taskId: sql.placeholder("taskId"),
          charged: sql.placeholder("charged"),
          refunded: sql.placeholder("refunded"),
          at: sql.placeholder("at"),
        })
        .prepare(),
    ).run({ clientId, taskId, charged: change.charged, refunded: change.refunded, at });
  }
}

export function findLearnedPrice(db: Db, priceKey: string): number | null {
  const row = prepared(db, "learnedPrices.find", () =>
    db
      .select({ points: learnedPrices.points })
      .from(learnedPrices)
      .where(eq(learnedPrices.priceKey, sql.placeholder("priceKey")))
      .prepare(),
  ).get({ priceKey });
  return row?.points ?? null;
}

/**
 * Written only when the price changes, as on PostgreSQL: a model's completions all teach the same
 * price, and rewriting its row with each one wrote the row and dirtied its page in every commit
 * (issue #43: 3.7 against 2.0 µs a completion in memory, `PIECES=learn_price node
 * bench/task-store-micro.mjs`; 13 against 3 µs on a WAL file).
 */
export function learnPrice(db: Db, priceKey: string, points: number, at: number): void {
  statement(
    db,
    "learnedPrices.learn",
    `INSERT INTO learned_prices (price_key, points, updated_at) VALUES (?, ?, ?)
       ON CONFLICT (price_key) DO UPDATE SET points = excluded.points, updated_at = excluded.updated_at
       WHERE points <> excluded.points`,
  ).run(priceKey, points, at);
}

/** SubmissionContext.reservations (see ReservationsAround). */
export function reservationsAround(db: DbOrTx, clientId: string, taskId: string): ReservationsAround {
  const offered = sql`(${tasks.phase} = 'submitted' OR ${tasks.submitAttempts} > 0)`;
  const row = db
    .select({
      inFlight: sql<number>`coalesce(sum(CASE WHEN ${offered} THEN ${tasks.pointsReserved} ELSE 0 END), 0)`,
      ahead: sql<number>`coalesce(sum(CASE WHEN NOT ${offered} AND ${tasks.id} < ${taskId} THEN ${tasks.pointsReserved} ELSE 0 END), 0)`,
      others: sql<number>`coalesce(sum(${tasks.pointsReserved}), 0)`,
    })
    .from(tasks)
    .where(and(eq(tasks.clientId, clientId), sql`${tasks.phase} <> 'done'`, sql`${tasks.id} <> ${taskId}`))
    .get();
  return { inFlight: row?.inFlight ?? 0, ahead: row?.ahead ?? 0, others: row?.others ?? 0 };
}

import { getTableColumns } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import pg from "pg";
import type {
  AccountStore,
  AttemptRow,
  ClientRow,
  ClientStore,
  CreditPosition,
  EndpointStore,
  NoticeStore,
  EventRow,
  EventStore,
  NewTaskRow,
  NudgeTarget,
  OpsStore,
  ReservationsAround,
  SessionRow,
  SessionStore,
  Store,
  TaskRow,
  TaskStore,
  TransitionOptions,
  TransitionRules,
  UpstreamAccountRow,
} from "../../store/store.js";
import { interleave, pickWithinRoom } from "../../store/fairness.js";
import { deliveryKey } from "../../store/delivery-key.js";
import { DELIVERY_FAILING_TASK, retryingEvent } from "../dashboard.js";
import { pgEndpointStore, pgNoticeStore } from "./endpoints.js";
import { newPgPool, pgClientConfig, type PgLimits } from "./open.js";
import { clients, dashboardSessions, deliveryAttempts, events, tasks, upstreamAccounts } from "../schema.js";

/**
 * The store on PostgreSQL, shared by any number of relay processes. The same operations as
 * SqliteStore, with what sharing needs:
 * - claims take rows with `FOR UPDATE SKIP LOCKED` under a lease and a claim token, so two
 *   instances never claim one row and a crashed instance's rows come back when the lease ends;
 * - a state change locks its task row, then its client's row (credits and the client's feed
 *   position), always in that order; other rows are touched with SKIP LOCKED, never waited on;
 * - each upstream account has one leader (a session advisory lock on a dedicated connection):
 *   only it submits and polls, and the read budget is also decided in the database, under the
 *   account row's lock, so it holds even while two leaders briefly overlap;
 * - per-key delivery caps count leased events in the database, so they hold across instances;
 * - writes that wake workers send NOTIFY; every instance LISTENs (its idle timer stays the fallback).
 *
 * The pull feed needs no snapshot trick: a client's feed position is taken by an UPDATE of its
 * row, which holds the row's lock until commit, so a position is only ever committed after every
 * lower one of that client (or rolled back and reused): a reader never passes an event that is
 * still to commit. test/integration/pg-store.test.ts interleaves two transactions to hold this.
 */

type Row = Record<string, unknown>;
type Queryable = pg.Pool | pg.PoolClient;

/** Column names of a table (the SQLite schema defines them; the PostgreSQL schema is held to the same names). */
function columnsOf(table: SQLiteTable): Array<[key: string, name: string]> {
  return Object.entries(getTableColumns(table)).map(([key, col]) => [key, col.name]);
}

/** Maps snake_case rows to the store's camelCase row types, and camelCase patches to SQL. */
class Mapper<T> {
  private readonly toName: Map<string, string>;
  private readonly toKey: Map<string, string>;
  constructor(table: SQLiteTable) {
    const cols = columnsOf(table);
    this.toName = new Map(cols);
    this.toKey = new Map(cols.map(([k, n]) => [n, k]));
  }
  row(raw: Row): T {
    const out: Row = {};
    for (const [name, value] of Object.entries(raw)) {
      const key = this.toKey.get(name);
      if (key) out[key] = value;
    }
    return out as T;
  }
  rows(raw: Row[]): T[] {
    return raw.map((r) => this.row(r));
  }
  /** `col = $n, …` for a patch, numbering from `from`; keys with undefined values are skipped. */
  set(patch: Row, from: number): { sql: string; values: unknown[] } {
    const parts: string[] = [];
    const values: unknown[] = [];
    for (const [key, value] of Object.entries(patch)) {
      if (value === undefined) continue;
      const name = this.toName.get(key);
      if (!name) throw new Error(`unknown column ${key}`);
      values.push(value);
      parts.push(`${name} = $${from + values.length - 1}`);
    }
    return { sql: parts.join(", "), values };
  }
  insert(table: string, row: Row): { sql: string; values: unknown[] } {
    const names: string[] = [];
    const values: unknown[] = [];
    for (const [key, value] of Object.entries(row)) {
      if (value === undefined) continue;
      const name = this.toName.get(key);
      if (!name) throw new Error(`unknown column ${key}`);
      names.push(name);
      values.push(value);
    }
    return { sql: `INSERT INTO ${table} (${names.join(", ")}) VALUES (${values.map((_, i) => `$${i + 1}`).join(", ")})`, values };
  }
}

const T = new Mapper<TaskRow>(tasks);
const E = new Mapper<EventRow>(events);
const A = new Mapper<AttemptRow>(deliveryAttempts);
const C = new Mapper<ClientRow>(clients);
const S = new Mapper<SessionRow>(dashboardSessions);
const U = new Mapper<UpstreamAccountRow>(upstreamAccounts);

const UNCLAIMED = "(claimed_until IS NULL OR claimed_until < $NOW)";
const unclaimed = (param: number) => UNCLAIMED.replace("$NOW", `$${param}`);
const RELEASED = { claimToken: null, claimedUntil: null } as const;
const NO_RESERVATIONS: ReservationsAround = { inFlight: 0, ahead: 0, others: 0 };
/** Advisory lock namespace of account leadership (the second key is hashtext(account)). */
const LEADER_LOCK_SPACE = 0x67_72_6c; // "grl"
const CHANNEL = "genrelay";

/** 64-bit integers come back as strings by default; every one the relay stores (epoch ms, counts) fits a double. */
const types = {
  getTypeParser(oid: number, format?: string) {
    if (oid === 20) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format as "text");
  },
} as pg.CustomTypesConfig;

export interface PgStoreOptions extends PgLimits {
  connectionString: string;
  /** Pool size (connections for requests and workers; two more are dedicated to leadership and LISTEN). */
  max?: number;
}

export class PgStore implements Store {
  readonly dialect = "postgres" as const;
  readonly pool: pg.Pool;
  readonly tasks: TaskStore;
  readonly events: EventStore;
  readonly endpoints: EndpointStore;
  readonly notices: NoticeStore;
  readonly clients: ClientStore;
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly ops: OpsStore;
  private leaderClient: pg.Client | null = null;
  private leaderClientDead = false;
  private readonly led = new Set<string>();
  private listener: pg.Client | null = null;
  private closed = false;

  constructor(
    private readonly options: PgStoreOptions,
    private readonly rules: TransitionRules,
  ) {
    // Bounded waits, and no connection that dies (server restart) can crash the process: see open.ts.
    this.pool = newPgPool({ ...pgClientConfig(options.connectionString, options), max: options.max ?? 10, types });
    const q = (sql: string, values: unknown[] = [], on: Queryable = this.pool) => on.query(sql, values).then((r) => r.rows as Row[]);
    const one = async (sql: string, values: unknown[] = [], on: Queryable = this.pool) => (await q(sql, values, on))[0];

    this.tasks = {
      create: (req) =>
        this.tx(async (c) => {
          const { row } = req;
          const existing = await one("SELECT * FROM tasks WHERE client_id = $1 AND idempotency_key = $2", [row.clientId, row.idempotencyKey], c);
          if (existing) return { task: T.row(existing), replayed: true };
          // With a cap or a credit limit, the client's row lock serialises its creations, so the checks
          // see each other; without either there is nothing to decide and creations run side by side.
          const position = req.needs.waiting || req.needs.credit ? await this.creditPositionIn(c, row.clientId, true) : undefined;
          const waiting = req.needs.waiting ? Number((await one("SELECT count(*) AS n FROM tasks WHERE client_id = $1 AND phase = 'waiting'", [row.clientId], c))!.n) : 0;
          const learnedPrice = req.needs.credit && row.priceKey ? await this.learnedPriceIn(c, row.priceKey) : null;
          const reserved = req.admit({ waiting, position: req.needs.credit ? position : undefined, learnedPrice });
          const ins = T.insert("tasks", { ...row, pointsReserved: reserved });
          const inserted = await one(`${ins.sql} ON CONFLICT (client_id, idempotency_key) DO NOTHING RETURNING *`, ins.values, c);
          if (!inserted) {
            // A concurrent creation with the same key committed first: it is the original.
            const original = await one("SELECT * FROM tasks WHERE client_id = $1 AND idempotency_key = $2", [row.clientId, row.idempotencyKey], c);
            return { task: T.row(original!), replayed: true };
          }
          await this.applyCredits(c, row.clientId, row.id, { charged: 0, refunded: 0, reserved }, row.createdAt);
          await q("SELECT pg_notify($1, 'submitter')", [CHANNEL], c);
          return { task: T.row(inserted), replayed: false };
        }),
      transition: (task, patch, o) => this.tx((c) => this.transitionIn(c, task.id, patch, o)),
      reschedule: async (id, token, patch) => {
        const set = T.set(patch, 3);
        if (!set.sql) return T.row((await one("SELECT * FROM tasks WHERE id = $1 AND claim_token = $2", [id, token]))!);
        const r = await one(`UPDATE tasks SET ${set.sql} WHERE id = $1 AND claim_token = $2 RETURNING *`, [id, token, ...set.values]);
        return r ? T.row(r) : undefined;
      },
      beginSubmission: (id, token, decide, o) =>
        this.tx(async (c) => {
          const raw = await one("SELECT * FROM tasks WHERE id = $1 FOR UPDATE", [id], c);
          if (!raw) return null;
          const current = T.row(raw);
          if (current.claimToken !== token) return null;
          const position = await this.creditPositionIn(c, current.clientId, true);
          const learnedPrice = current.priceKey ? await this.learnedPriceIn(c, current.priceKey) : null;
          const needsAround = position !== undefined && position.limit !== null && !position.revoked && current.submitAttempts === 0;
          const reservations = needsAround ? await this.reservationsAround(c, current.clientId, current.id) : NO_RESERVATIONS;
          const step = decide({ task: current, position, learnedPrice, reservations });
          const task = step.transition ? await this.transitionIn(c, id, step.patch, o, current) : await this.updateLeased(c, id, token, step.patch);
          return task ? { kind: step.kind, task } : null;
        }),
      decideAndTransition: (id, clientId, decide, o) =>
        this.tx(async (c) => {
          const raw = await one(clientId === null ? "SELECT * FROM tasks WHERE id = $1 FOR UPDATE" : "SELECT * FROM tasks WHERE id = $1 AND client_id = $2 FOR UPDATE", clientId === null ? [id] : [id, clientId], c);
          if (!raw) return null;
          const before = T.row(raw);
          const patch = decide(before);
          if (patch === null) return { before, after: before };
          const after = await this.transitionIn(c, id, patch, o, before);
          return after ? { before, after } : null;
        }),
      find: async (id) => opt(T, await one("SELECT * FROM tasks WHERE id = $1", [id])),
      findOfClient: async (clientId, id) => opt(T, await one("SELECT * FROM tasks WHERE id = $1 AND client_id = $2", [id, clientId])),
      findByAnyId: async (id) => {
        const byId = await one("SELECT * FROM tasks WHERE id = $1", [id]);
        if (byId) return [T.row(byId)];
        return T.rows(await q("SELECT * FROM tasks WHERE upstream_task_id = $1 ORDER BY id", [id]));
      },
      list: async (q0) => {
        const where = ["client_id = $1"];
        const values: unknown[] = [q0.clientId];
        const add = (cond: (n: number) => string, v: unknown) => {
          values.push(v);
          where.push(cond(values.length));
        };
        if (q0.beforeId) add((n) => `id < $${n}`, q0.beforeId);
        if (q0.type) add((n) => `type = $${n}`, q0.type);
        if (q0.status) add((n) => `status = $${n}`, q0.status);
        if (q0.search) {
          add(
            (n) => `(id = $${n} OR upstream_task_id = $${n} OR (metadata_json IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_each_text(metadata_json::jsonb) m WHERE m.value = $${n})))`,
            q0.search,
          );
        }
        if (q0.deliveryFailing) where.push(DELIVERY_FAILING_TASK);
        values.push(q0.limit);
        return T.rows(await q(`SELECT * FROM tasks WHERE ${where.join(" AND ")} ORDER BY id DESC LIMIT $${values.length}`, values));
      },
      listForSupport: async (q0) => {
        const where: string[] = [];
        const values: unknown[] = [];
        if (q0.clientId) where.push(`client_id = $${values.push(q0.clientId)}`);
        if (q0.status) where.push(`status = $${values.push(q0.status)}`);
        values.push(q0.limit);
        return T.rows(await q(`SELECT * FROM tasks ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT $${values.length}`, values));
      },
      waitingAhead: async (account, id) => Number((await one("SELECT count(*) AS n FROM tasks WHERE phase = 'waiting' AND upstream_account = $1 AND id < $2", [account, id]))!.n),
      unsubmittedOfClient: async (clientId, now) =>
        T.rows(await q(`SELECT * FROM tasks WHERE client_id = $1 AND phase = 'waiting' AND submit_attempts = 0 AND ${unclaimed(2)}`, [clientId, now])),
      countsOfClient: async (clientId) => {
        const counts: Record<string, number> = { queued: 0, processing: 0, succeeded: 0, failed: 0, canceled: 0 };
        for (const r of await q("SELECT status, count(*) AS n FROM tasks WHERE client_id = $1 GROUP BY status", [clientId])) counts[r.status as string] = Number(r.n);
        return counts;
      },
      hourlyCounts: async (clientId, since) =>
        (await q("SELECT (created_at / 3600000) * 3600000 AS hour, status, count(*) AS n FROM tasks WHERE client_id = $1 AND created_at >= $2 GROUP BY 1, 2", [clientId, since])).map((r) => ({
          hour: Number(r.hour),
          status: r.status as TaskRow["status"],
          n: Number(r.n),
        })),
      recentCallbackUrls: async (clientId) => [
        ...new Set((await q("SELECT callback_url FROM tasks WHERE client_id = $1 AND callback_url IS NOT NULL ORDER BY id DESC LIMIT 500", [clientId])).map((r) => r.callback_url as string)),
      ],
      claimFairly: async (account, o) => {
        if (o.limit <= 0) return [];
        const candidates = await q(
          `SELECT c.id, c.max_running,
                  (SELECT count(*) FROM tasks r WHERE r.phase = 'submitted' AND r.upstream_account = $1 AND r.client_id = c.id) AS running
           FROM clients c
           WHERE c.upstream_account = $1
             AND EXISTS (SELECT 1 FROM tasks t WHERE t.phase = 'waiting' AND t.upstream_account = $1 AND t.client_id = c.id
                           AND t.next_run_at <= $2 AND ${unclaimed(2).replaceAll("claimed_until", "t.claimed_until")})
           ORDER BY c.last_admitted_at NULLS FIRST, c.id`,
          [account, o.now],
        );
        const queues: string[][] = [];
        for (const cand of candidates) {
          const max = cand.max_running === null ? null : Number(cand.max_running);
          const room = max === null ? o.limit : Math.min(o.limit, max - Number(cand.running));
          if (room <= 0) continue;
          const ids = await q(
            `SELECT id FROM tasks WHERE phase = 'waiting' AND upstream_account = $1 AND client_id = $2 AND next_run_at <= $3 AND ${unclaimed(3)}
             ORDER BY next_run_at, id LIMIT $4`,
            [account, cand.id, o.now, room],
          );
          queues.push(ids.map((r) => r.id as string));
        }
        const picked = interleave(queues, o.limit);
        if (picked.length === 0) return [];
        const claimed = await this.claimTasks(`id = ANY($4::text[]) AND phase = 'waiting' AND next_run_at <= $3`, [picked], o);
        const order = new Map(picked.map((id, i) => [id, i]));
        return claimed.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
      },
      claimDue: async (phase, account, o) =>
        (await this.claimTasks(`phase = $4 AND upstream_account = $5 AND next_run_at <= $3`, [phase, account], o, "ORDER BY next_run_at, id")).sort(
          (a, b) => (a.nextRunAt ?? 0) - (b.nextRunAt ?? 0) || (a.id < b.id ? -1 : 1),
        ),
      claimIds: async (ids, phase, o) => (ids.length === 0 ? [] : this.claimTasks(`id = ANY($4::text[]) AND phase = $5`, [ids, phase], { ...o, limit: ids.length })),
      claimExpired: async (o) => this.claimTasks(`phase = 'waiting' AND submit_attempts = 0 AND expires_at <= $3`, [], o, "ORDER BY expires_at"),
      claimAcrossClients: async (phase, o) => {
        if (o.limit <= 0) return [];
        const due = `phase = $1 AND next_run_at <= $2 AND ${unclaimed(2)}`;
        const candidates = await q(`SELECT client_id, min(next_run_at) AS first FROM tasks WHERE ${due} GROUP BY client_id`, [phase, o.now]);
        candidates.sort((a, b) => o.rank(a.client_id as string) - o.rank(b.client_id as string) || Number(a.first) - Number(b.first));
        const queues: string[][] = [];
        for (const cand of candidates) {
          const ids = await q(`SELECT id FROM tasks WHERE ${due} AND client_id = $3 ORDER BY next_run_at, id LIMIT $4`, [phase, o.now, cand.client_id, o.limit]);
          queues.push(ids.map((r) => r.id as string));
        }
        const picked = interleave(queues, o.limit);
        if (picked.length === 0) return [];
        const claimed = await this.claimTasks(`id = ANY($4::text[]) AND phase = $5 AND next_run_at <= $3`, [picked, phase], o);
        const order = new Map(picked.map((id, i) => [id, i]));
        return claimed.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
      },
      nextDueAt: async (phase, now) => {
        const due = await one(`SELECT next_run_at AS at FROM tasks WHERE phase = $1 AND next_run_at IS NOT NULL AND ${unclaimed(2)} ORDER BY next_run_at LIMIT 1`, [phase, now]);
        const lease = await one("SELECT min(claimed_until) AS at FROM tasks WHERE phase = $1 AND claimed_until >= $2", [phase, now]);
        const a = due ? Number(due.at) : null;
        const b = lease?.at === null || lease?.at === undefined ? null : Number(lease.at) + 1;
        return a === null ? b : b === null ? a : Math.min(a, b);
      },
      nextExpiryAt: async () => {
        const r = await one("SELECT expires_at AS at FROM tasks WHERE phase = 'waiting' AND expires_at IS NOT NULL AND submit_attempts = 0 ORDER BY expires_at LIMIT 1");
        return r ? Number(r.at) : null;
      },
      accountsWithDue: async (phase, now) =>
        (
          await q(
            `SELECT a.account FROM (SELECT DISTINCT upstream_account AS account FROM clients) a
             WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.phase = $1 AND t.upstream_account = a.account AND t.next_run_at <= $2
                           AND (t.claimed_until IS NULL OR t.claimed_until < $2))`,
            [phase, now],
          )
        ).map((r) => r.account as string),
      accountsInFlight: async () => (await q("SELECT DISTINCT upstream_account AS account FROM tasks WHERE phase = 'submitted'")).map((r) => r.account as string),
      countRunning: async (account) => Number((await one("SELECT count(*) AS n FROM tasks WHERE phase = 'submitted' AND upstream_account = $1", [account]))!.n),
      listInFlight: async (account) =>
        (await q("SELECT id, upstream_task_id, status, submitted_at, type, model FROM tasks WHERE phase = 'submitted' AND upstream_account = $1", [account])).map((r) => ({
          id: r.id as string,
          upstreamTaskId: r.upstream_task_id as string | null,
          status: r.status as TaskRow["status"],
          submittedAt: r.submitted_at === null ? null : Number(r.submitted_at),
          type: r.type as "image" | "video",
          model: r.model as string,
        })),
      pruneFinished: (before, batch) =>
        this.tx(async (c) => {
          // SKIP LOCKED: several instances prune side by side, each its own batch, never waiting on another.
          const ids = (
            await q(
              `SELECT t.id FROM tasks t WHERE t.phase = 'done' AND t.completed_at < $1
                 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.delivery_status = 'pending')
               LIMIT $2 FOR UPDATE SKIP LOCKED`,
              [before, batch],
              c,
            )
          ).map((r) => r.id as string);
          if (ids.length === 0) return 0;
          await q("DELETE FROM delivery_attempts WHERE task_id = ANY($1::text[])", [ids], c);
          await q("DELETE FROM events WHERE task_id = ANY($1::text[])", [ids], c);
          await q("DELETE FROM tasks WHERE id = ANY($1::text[])", [ids], c);
          return ids.length;
        }),
    };

    this.events = {
      claimDue: async (o) => {
        if (o.limit <= 0) return [];
        const claimable = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
          AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.delivery_status = 'pending')`;
        const candidates = await q(
          `SELECT seq, client_id, destination_host FROM events WHERE ${claimable}
             AND NOT ((client_id || '|' || destination_host) = ANY($2::text[])) AND NOT (client_id = ANY($4::text[]))
           ORDER BY next_attempt_at, seq LIMIT $3`,
          [o.now, o.excludeKeys, o.limit * 4, o.excludeClients ?? []],
        );
        if (candidates.length === 0) return [];
        // What every instance has in flight per key: leased events count against the shared cap.
        const keys = [...new Set(candidates.map((c0) => deliveryKey(c0.client_id as string, c0.destination_host as string)))];
        const leased = new Map<string, number>();
        for (const r of await q(
          `SELECT client_id || '|' || destination_host AS key, count(*) AS n FROM events
           WHERE delivery_status = 'pending' AND claimed_until >= $1 AND (client_id || '|' || destination_host) = ANY($2::text[]) GROUP BY 1`,
          [o.now, keys],
        )) {
          leased.set(r.key as string, Number(r.n));
        }
        const picked = pickWithinRoom(
          candidates.map((c0) => ({ seq: Number(c0.seq), clientId: c0.client_id as string, host: c0.destination_host as string })),
          o.limit,
          (key) => Math.min(o.keyRoom(key), o.maxPerKey - (leased.get(key) ?? 0)),
          o.clientRoom,
        ).map((c0) => c0.seq);
        if (picked.length === 0) return [];
        const rows = await q(
          `UPDATE events SET claimed_until = $3, claim_token = $4
           WHERE seq IN (SELECT seq FROM events WHERE seq = ANY($2::bigint[]) AND ${claimable} FOR UPDATE SKIP LOCKED)
           RETURNING *`,
          [o.now, picked, o.now + o.leaseMs, o.token],
        );
        return E.rows(rows).sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
      },
      nextDueAt: async (o) => {
        const rows = await q(
          `SELECT next_attempt_at AS at, client_id, client_id || '|' || destination_host AS key FROM events
           WHERE delivery_status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1) ORDER BY next_attempt_at LIMIT 200`,
          [o.now],
        );
        if (rows.length === 0) return null;
        const excluded = new Set(o.excludeKeys);
        const clientsOut = new Set(o.excludeClients ?? []);
        for (const r of rows) if (!excluded.has(r.key as string) && !clientsOut.has(r.client_id as string)) return Number(r.at);
        return rows.length < 200 ? null : o.now + 1_000;
      },
      recordAttempt: (eventId, token, attempt, patch) =>
        new Promise<void>((resolve, reject) => {
          this.attempts.push({ eventId, token, attempt, patch, resolve, reject });
          if (this.attempts.length === 1) setImmediate(() => void this.flushAttempts());
        }),
      release: async (eventId, token, patch) => {
        await this.updateLeasedEvent(this.pool, eventId, token, { ...patch, ...RELEASED });
      },
      postponeKey: async (clientId, host, until, now) =>
        (
          await this.pool.query(
            `UPDATE events SET next_attempt_at = $3 WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'
               AND next_attempt_at < $3 AND (claimed_until IS NULL OR claimed_until < $4)`,
            [clientId, host, until, now],
          )
        ).rowCount ?? 0,
      claimTrial: async (key, o) => {
        const claimable = `delivery_status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)
          AND NOT EXISTS (SELECT 1 FROM events e2 WHERE e2.task_id = events.task_id AND e2.sequence < events.sequence AND e2.delivery_status = 'pending')`;
        const r = await one(
          `UPDATE events SET claimed_until = $4, claim_token = $5
           WHERE seq = (SELECT seq FROM events WHERE client_id = $2 AND destination_host = $3 AND ${claimable}
                        ORDER BY (attempts = 0), next_attempt_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
           RETURNING *`,
          [o.now, key.clientId, key.host, o.now + o.leaseMs, o.token],
        );
        return opt(E, r);
      },
      retryKeyNow: async (key, now) => {
        const n =
          (
            await this.pool.query(
              `UPDATE events SET next_attempt_at = $3 WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'
                 AND (claimed_until IS NULL OR claimed_until < $3)`,
              [key.clientId, key.host, now],
            )
          ).rowCount ?? 0;
        if (n > 0) await this.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
        return n;
      },
      pendingOfKey: async (key) =>
        Number((await one("SELECT count(*) AS n FROM events WHERE client_id = $1 AND destination_host = $2 AND delivery_status = 'pending'", [key.clientId, key.host]))!.n),
      requeueLastOfTask: (taskId, now) =>
        this.tx(async (c) => {
          const last = await one("SELECT id FROM events WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1 FOR UPDATE", [taskId], c);
          if (!last) return undefined;
          const r = await one(
            `UPDATE events SET delivery_status = 'pending', round_attempts = 0, next_attempt_at = $2, failed_at = NULL, claim_token = NULL, claimed_until = NULL
             WHERE id = $1 RETURNING *`,
            [last.id, now],
            c,
          );
          await q("SELECT pg_notify($1, 'dispatcher')", [CHANNEL], c);
          return opt(E, r);
        }),
      requeueFailed: async (clientId, since, now) => {
        const n =
          (
            await this.pool.query(
              `UPDATE events SET delivery_status = 'pending', round_attempts = 0, next_attempt_at = $3, failed_at = NULL, claimed_until = NULL, claim_token = NULL
               WHERE client_id = $1 AND delivery_status = 'failed' AND created_at >= $2`,
              [clientId, since, now],
            )
          ).rowCount ?? 0;
        if (n > 0) await this.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
        return n;
      },
      retryingOfClient: async (clientId) => Number((await one(`SELECT count(*) AS n FROM events e WHERE e.client_id = $1 AND ${retryingEvent("e")}`, [clientId]))!.n),
      find: async (id) => opt(E, await one("SELECT * FROM events WHERE id = $1", [id])),
      lastOfTask: async (taskId) => opt(E, await one("SELECT * FROM events WHERE task_id = $1 ORDER BY sequence DESC LIMIT 1", [taskId])),
      lastOfTasks: async (taskIds) => {
        const map = new Map<string, EventRow>();
        if (taskIds.length === 0) return map;
        for (const r of E.rows(await q("SELECT DISTINCT ON (task_id) * FROM events WHERE task_id = ANY($1::text[]) ORDER BY task_id, sequence DESC", [taskIds]))) map.set(r.taskId, r);
        return map;
      },
      ofTask: async (taskId) => E.rows(await q("SELECT * FROM events WHERE task_id = $1 ORDER BY sequence", [taskId])),
      attemptsOfTask: async (taskId) => A.rows(await q("SELECT * FROM delivery_attempts WHERE task_id = $1 ORDER BY attempted_at, id", [taskId])),
      feed: async (clientId, afterPos, limit) => E.rows(await q("SELECT * FROM events WHERE client_id = $1 AND client_seq > $2 ORDER BY client_seq LIMIT $3", [clientId, afterPos, limit])),
      clientSeqAtOrBefore: async (clientId, seq) => Number((await one("SELECT coalesce(max(client_seq), 0) AS pos FROM events WHERE client_id = $1 AND seq <= $2", [clientId, seq]))!.pos),
    };

    this.endpoints = pgEndpointStore(this.pool);
    this.notices = pgNoticeStore(this.pool, async () => {
      await this.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
    });

    this.clients = {
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
        return opt(C, await one(`UPDATE clients SET ${set.sql} WHERE id = $1 RETURNING *`, [id, ...set.values]));
      },
      updateWith: (id, change) =>
        this.tx(async (c) => {
          const raw = await one("SELECT * FROM clients WHERE id = $1 FOR UPDATE", [id], c);
          if (!raw) return undefined;
          const client = C.row(raw);
          const { patch, result } = change(client);
          const set = C.set(patch, 2);
          if (!set.sql) return { client, result };
          return { client: C.row((await one(`UPDATE clients SET ${set.sql} WHERE id = $1 RETURNING *`, [id, ...set.values], c))!), result };
        }),
      markAdmitted: async (id, at) => {
        await this.pool.query("UPDATE clients SET last_admitted_at = $2 WHERE id = $1", [id, at]);
      },
      creditPosition: (id) => this.creditPositionIn(this.pool, id, false),
      ledger: async (id) =>
        (await q("SELECT task_id, charged, refunded, at FROM credit_ledger WHERE client_id = $1 ORDER BY id", [id])).map((r) => ({
          taskId: r.task_id as string,
          charged: Number(r.charged),
          refunded: Number(r.refunded),
          at: Number(r.at),
        })),
    };

    this.accounts = {
      state: async (account) => opt(U, await one("SELECT * FROM upstream_accounts WHERE id = $1", [account])),
      updateState: async (account, patch, now) => {
        const full = { ...patch, updatedAt: now };
        const ins = U.insert("upstream_accounts", { id: account, ...full });
        const set = U.set(full, ins.values.length + 1);
        await this.pool.query(`${ins.sql} ON CONFLICT (id) DO UPDATE SET ${set.sql}`, [...ins.values, ...set.values]);
      },
      takeRead: (account, at, limit, windowMs) =>
        this.tx(async (c) => {
          // The account row's lock serialises takers across instances: two leaders overlapping for a
          // moment still cannot spend more than the window allows between them.
          await q("INSERT INTO upstream_accounts (id, updated_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", [account, at], c);
          await q("SELECT id FROM upstream_accounts WHERE id = $1 FOR UPDATE", [account], c);
          const used = Number((await one("SELECT count(*) AS n FROM upstream_reads WHERE account = $1 AND at > $2", [account, at - windowMs], c))!.n);
          if (used >= limit) return false;
          await q("INSERT INTO upstream_reads (account, at) VALUES ($1, $2)", [account, at], c);
          return true;
        }),
      readsSince: async (account, since) => (await q("SELECT at FROM upstream_reads WHERE account = $1 AND at > $2 ORDER BY at", [account, since])).map((r) => Number(r.at)),
      pruneReads: async (account, before) => {
        await this.pool.query("DELETE FROM upstream_reads WHERE account = $1 AND at < $2", [account, before]);
      },
      durationSamples: async (type, model) => {
        const r = await one("SELECT samples_json FROM duration_stats WHERE type = $1 AND model = $2", [type, model]);
        return r ? (JSON.parse(r.samples_json as string) as number[]) : [];
      },
      saveDurationSamples: async (type, model, samples, now) => {
        await this.pool.query(
          `INSERT INTO duration_stats (type, model, samples_json, updated_at) VALUES ($1, $2, $3, $4)
           ON CONFLICT (type, model) DO UPDATE SET samples_json = EXCLUDED.samples_json, updated_at = EXCLUDED.updated_at`,
          [type, model, JSON.stringify(samples), now],
        );
      },
    };

    this.sessions = {
      open: (row, now) =>
        this.tx(async (c) => {
          await q("DELETE FROM dashboard_sessions WHERE expires_at < $1 OR revoked_at IS NOT NULL", [now], c);
          const ins = S.insert("dashboard_sessions", row);
          await q(ins.sql, ins.values, c);
        }),
      find: async (hash) => opt(S, await one("SELECT * FROM dashboard_sessions WHERE token_hash = $1", [hash])),
      touch: async (hash, now) => {
        await this.pool.query("UPDATE dashboard_sessions SET last_seen_at = $2 WHERE token_hash = $1", [hash, now]);
      },
      revoke: async (hash, now) => {
        await this.pool.query("UPDATE dashboard_sessions SET revoked_at = $2 WHERE token_hash = $1 AND revoked_at IS NULL", [hash, now]);
      },
    };

    this.ops = {
      leads: (account) => this.leads(account),
      listen: (nudge) => this.listen(nudge),
      recover: async (hostOf) => {
        // Other instances may be alive: their leases are left to expire. Only the backfill runs.
        for (const r of await q("SELECT DISTINCT callback_url FROM events WHERE destination_host = '' AND callback_url IS NOT NULL")) {
          await this.pool.query("UPDATE events SET destination_host = $2 WHERE callback_url = $1 AND destination_host = ''", [r.callback_url, hostOf(r.callback_url as string)]);
        }
        return 0;
      },
      releaseLeases: async (prefix) => {
        const a = await this.pool.query("UPDATE tasks SET claimed_until = NULL, claim_token = NULL WHERE claim_token LIKE $1", [`${prefix}:%`]);
        const b = await this.pool.query("UPDATE events SET claimed_until = NULL, claim_token = NULL WHERE claim_token LIKE $1", [`${prefix}:%`]);
        return (a.rowCount ?? 0) + (b.rowCount ?? 0);
      },
      probeWrite: async (now) => {
        try {
          await this.tx(async (c) => {
            await q("INSERT INTO health_probe (at) VALUES ($1)", [now], c);
            await q("DELETE FROM health_probe", [], c);
          });
          return null;
        } catch (err) {
          return `database not writable: ${(err as Error).message}`;
        }
      },
      gauges: async () => ({
        tasksByStatus: (await q("SELECT status, count(*) AS n FROM tasks GROUP BY status")).map((r) => ({ status: r.status as string, n: Number(r.n) })),
        tasksByAccountPhase: (await q("SELECT upstream_account AS account, phase, count(*) AS n FROM tasks WHERE phase IN ('waiting', 'submitted') GROUP BY 1, 2")).map((r) => ({
          account: r.account as string,
          phase: r.phase as string,
          n: Number(r.n),
        })),
        eventsByStatus: (await q("SELECT delivery_status AS status, count(*) AS n FROM events WHERE delivery_status IN ('pending', 'failed') GROUP BY 1")).map((r) => ({
          status: r.status as string,
          n: Number(r.n),
        })),
      }),
    };
  }

  /** Attempts settling in the same turn of the event loop, written together by flushAttempts. */
  private attempts: Array<{ eventId: string; token: string; attempt: Row; patch: Row; resolve: () => void; reject: (err: unknown) => void }> = [];

  /**
   * Group commit for delivery attempts: one transaction and one multi-row INSERT for every attempt
   * that settled in the same turn, then each event's update under its lease. Should the batch fail
   * (a value the database refuses slipped past the core's cleaning), each record is written again
   * in its own transaction, so one bad record never rolls back another's (DESIGN §12).
   */
  private async flushAttempts(): Promise<void> {
    const batch = this.attempts;
    this.attempts = [];
    if (batch.length === 0) return;
    try {
      await this.tx((c) => this.writeAttempts(c, batch));
      for (const b of batch) b.resolve();
    } catch (err) {
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      for (const b of batch) {
        await this.tx((c) => this.writeAttempts(c, [b])).then(b.resolve, b.reject);
      }
    }
  }

  private async writeAttempts(c: pg.PoolClient, batch: Array<{ eventId: string; token: string; attempt: Row; patch: Row }>): Promise<void> {
    const cols = columnsOf(deliveryAttempts);
    const values: unknown[] = [];
    const tuples = batch.map(({ attempt }) => `(${cols.map(([key]) => `$${values.push(attempt[key] ?? null)}`).join(", ")})`);
    await c.query(`INSERT INTO delivery_attempts (${cols.map(([, name]) => name).join(", ")}) VALUES ${tuples.join(", ")}`, values);
    for (const b of batch) await this.updateLeasedEvent(c, b.eventId, b.token, { ...b.patch, ...RELEASED });
  }

  /** Runs `work` in one transaction on one pooled connection. */
  async tx<R>(work: (c: pg.PoolClient) => Promise<R>): Promise<R> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await c.query("BEGIN");
      const result = await work(c);
      await c.query("COMMIT");
      return result;
    } catch (err) {
      // A connection that cannot even roll back (lost, timed out) is thrown away, not pooled again.
      await c.query("ROLLBACK").catch((e: unknown) => {
        broken = e instanceof Error ? e : new Error(String(e));
      });
      throw err;
    } finally {
      c.release(broken);
    }
  }

  /** The state change of TaskStore.transition inside `c`'s transaction; `locked`: the row as already read FOR UPDATE. */
  private async transitionIn(c: pg.PoolClient, id: string, patch: Partial<NewTaskRow>, o: TransitionOptions, locked?: TaskRow): Promise<TaskRow | undefined> {
    const before = locked ?? (await this.lockTask(c, id));
    if (!before || (o.token && before.claimToken !== o.token)) return undefined;
    const next = this.rules.prepare(before, patch);
    const set = T.set(next, 2);
    const updated = set.sql ? T.row((await c.query(`UPDATE tasks SET ${set.sql} WHERE id = $1 RETURNING *`, [id, ...set.values])).rows[0] as Row) : before;
    const { change, learn, wake } = this.rules.settle(before, updated);
    await this.applyCredits(c, updated.clientId, updated.id, change, o.now);
    if (wake) {
      // Rows another transaction holds are being changed by it anyway: skipped, never waited on (no deadlock).
      await c.query(
        `UPDATE tasks SET next_run_at = $2 WHERE id IN (SELECT id FROM tasks WHERE client_id = $1 AND phase = 'waiting' AND submit_attempts = 0
           AND next_run_at > $2 AND ${unclaimed(2)} FOR UPDATE SKIP LOCKED)`,
        [updated.clientId, o.now],
      );
    }
    if (learn) {
      await c.query(
        "INSERT INTO learned_prices (price_key, points, updated_at) VALUES ($1, $2, $3) ON CONFLICT (price_key) DO UPDATE SET points = EXCLUDED.points, updated_at = EXCLUDED.updated_at",
        [learn.priceKey, learn.points, o.now],
      );
    }
    const event = this.rules.eventFor(before, updated, o.now, o.firstAttemptDelayMs);
    if (!event) return updated;
    const withSeq = T.row((await c.query("UPDATE tasks SET event_sequence = $2 WHERE id = $1 RETURNING *", [id, event.sequence])).rows[0] as Row);
    // The client's row lock (held to commit) orders its feed positions by commit: see the class comment.
    const seq = Number(((await c.query("UPDATE clients SET event_seq = event_seq + 1 WHERE id = $1 RETURNING event_seq", [updated.clientId])).rows[0] as Row).event_seq);
    const ins = E.insert("events", { ...event, clientSeq: seq });
    await c.query(ins.sql, ins.values);
    await c.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
    return withSeq;
  }

  private async lockTask(c: pg.PoolClient, id: string): Promise<TaskRow | undefined> {
    const r = (await c.query("SELECT * FROM tasks WHERE id = $1 FOR UPDATE", [id])).rows[0] as Row | undefined;
    return r ? T.row(r) : undefined;
  }

  private async updateLeased(c: Queryable, id: string, token: string, patch: Partial<NewTaskRow>): Promise<TaskRow | undefined> {
    const set = T.set(patch, 3);
    const r = (await c.query(`UPDATE tasks SET ${set.sql} WHERE id = $1 AND claim_token = $2 RETURNING *`, [id, token, ...set.values])).rows[0] as Row | undefined;
    return r ? T.row(r) : undefined;
  }

  private async updateLeasedEvent(c: Queryable, id: string, token: string, patch: Row): Promise<void> {
    const set = E.set(patch, 3);
    await c.query(`UPDATE events SET ${set.sql} WHERE id = $1 AND claim_token = $2`, [id, token, ...set.values]);
  }

  /** Claims tasks matching `where` ($1 lease end, $2 token, $3 now, $4… extra) with SKIP LOCKED. */
  private async claimTasks(where: string, extra: unknown[], o: { now: number; leaseMs: number; token: string; limit: number }, order = ""): Promise<TaskRow[]> {
    if (o.limit <= 0) return [];
    const limitParam = 4 + extra.length;
    const rows = await this.pool.query(
      `UPDATE tasks SET claimed_until = $1, claim_token = $2
       WHERE id IN (SELECT id FROM tasks WHERE ${where} AND ${unclaimed(3)} ${order} LIMIT $${limitParam} FOR UPDATE SKIP LOCKED)
       RETURNING *`,
      [o.now + o.leaseMs, o.token, o.now, ...extra, o.limit],
    );
    return T.rows(rows.rows as Row[]);
  }

  private async creditPositionIn(c: Queryable, clientId: string, lock: boolean): Promise<CreditPosition | undefined> {
    const r = (
      await c.query(`SELECT points_charged, points_refunded, points_reserved, credit_limit, revoked_at FROM clients WHERE id = $1${lock ? " FOR UPDATE" : ""}`, [clientId])
    ).rows[0] as Row | undefined;
    if (!r) return undefined;
    return {
      charged: Number(r.points_charged),
      refunded: Number(r.points_refunded),
      reserved: Number(r.points_reserved),
      limit: r.credit_limit === null ? null : Number(r.credit_limit),
      revoked: r.revoked_at !== null,
    };
  }

  private async learnedPriceIn(c: Queryable, priceKey: string): Promise<number | null> {
    const r = (await c.query("SELECT points FROM learned_prices WHERE price_key = $1", [priceKey])).rows[0] as Row | undefined;
    return r ? Number(r.points) : null;
  }

  private async reservationsAround(c: Queryable, clientId: string, taskId: string): Promise<ReservationsAround> {
    const r = (
      await c.query(
        `SELECT coalesce(sum(CASE WHEN phase = 'submitted' OR submit_attempts > 0 THEN points_reserved ELSE 0 END), 0) AS in_flight,
                coalesce(sum(CASE WHEN NOT (phase = 'submitted' OR submit_attempts > 0) AND id < $2 THEN points_reserved ELSE 0 END), 0) AS ahead,
                coalesce(sum(points_reserved), 0) AS others
         FROM tasks WHERE client_id = $1 AND phase <> 'done' AND id <> $2`,
        [clientId, taskId],
      )
    ).rows[0] as Row;
    return { inFlight: Number(r.in_flight), ahead: Number(r.ahead), others: Number(r.others) };
  }

  private async applyCredits(c: Queryable, clientId: string, taskId: string, change: { charged: number; refunded: number; reserved: number }, at: number): Promise<void> {
    if (change.charged === 0 && change.refunded === 0 && change.reserved === 0) return;
    await c.query(
      `UPDATE clients SET points_charged = points_charged + $2, points_refunded = points_refunded + $3, points_reserved = greatest(0, points_reserved + $4) WHERE id = $1`,
      [clientId, change.charged, change.refunded, change.reserved],
    );
    if (change.charged !== 0 || change.refunded !== 0) {
      await c.query("INSERT INTO credit_ledger (client_id, task_id, charged, refunded, at) VALUES ($1, $2, $3, $4, $5)", [clientId, taskId, change.charged, change.refunded, at]);
    }
  }

  /**
   * Account leadership: a session advisory lock per account on one dedicated connection. A held
   * lock is checked with a cheap query on that connection at most once a second; if the connection
   * died, every lock went with it (the server released them), so this instance stops leading and
   * another one's next try takes over.
   */
  private lastCheck = 0;
  private async leads(account: string): Promise<boolean> {
    if (this.closed) return false;
    try {
      const client = await this.leaderConnection();
      if (this.led.has(account)) {
        if (Date.now() - this.lastCheck > 1_000) {
          await client.query("SELECT 1");
          this.lastCheck = Date.now();
        }
        return true;
      }
      const r = (await client.query("SELECT pg_try_advisory_lock($1, hashtext($2)) AS ok", [LEADER_LOCK_SPACE, account])).rows[0] as Row;
      if (r.ok === true) this.led.add(account);
      return r.ok === true;
    } catch {
      this.dropLeaderConnection();
      return false;
    }
  }

  private async leaderConnection(): Promise<pg.Client> {
    if (this.leaderClient && !this.leaderClientDead) return this.leaderClient;
    this.dropLeaderConnection();
    const client = new pg.Client({ ...pgClientConfig(this.options.connectionString, this.options), types });
    client.on("error", () => this.dropLeaderConnection());
    client.on("end", () => this.dropLeaderConnection());
    await client.connect();
    this.leaderClient = client;
    this.leaderClientDead = false;
    return client;
  }

  private dropLeaderConnection(): void {
    this.led.clear();
    this.leaderClientDead = true;
    const old = this.leaderClient;
    this.leaderClient = null;
    old?.end().catch(() => {});
  }

  private async listen(nudge: (target: NudgeTarget) => void): Promise<void> {
    if (this.listener || this.closed) return;
    const client = new pg.Client(pgClientConfig(this.options.connectionString, this.options));
    const reconnect = () => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => {});
      // The idle wake-up covers the gap; listen again shortly.
      if (!this.closed) setTimeout(() => void this.listen(nudge).catch(() => {}), 1_000).unref();
    };
    client.on("error", reconnect);
    client.on("end", reconnect);
    client.on("notification", (n) => {
      if (n.payload === "submitter" || n.payload === "poller" || n.payload === "dispatcher") nudge(n.payload);
    });
    this.listener = client;
    await client.connect();
    await client.query(`LISTEN ${CHANNEL}`);
  }

  async close(): Promise<void> {
    this.closed = true;
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => {});
    const leader = this.leaderClient;
    this.leaderClient = null;
    this.led.clear();
    await leader?.end().catch(() => {});
    await this.pool.end();
  }
}

function opt<R>(m: Mapper<R>, raw: Row | undefined): R | undefined {
  return raw ? m.row(raw) : undefined;
}

import { randomBytes } from "node:crypto";
import type pg from "pg";
import type {
  AccountStore,
  ClientStore,
  CreditPosition,
  KeyHealthStore,
  WebhookEndpointStore,
  EventStore,
  LeaderFence,
  LeaderLease,
  NoticeStore,
  NudgeTarget,
  OpsStore,
  OutputStore,
  RateLimitStore,
  SessionStore,
  Store,
  TaskChanged,
  TaskStore,
  TransitionOptions,
  TransitionRules,
} from "../../store/store.js";
import type { NewTaskRow, TaskRow } from "../../store/rows.js";
import { pgKeyHealth } from "./key-health.js";
import { endpointsOf, fanOutEvent, pgWebhookEndpoints } from "./webhook-endpoints.js";
import { subscribedTypes } from "../../store/endpoint-fanout.js";
import { pgNoticeStore } from "./notices.js";
import {
  columnsOf,
  T,
  E,
  unclaimed,
  RELEASED,
  CHANNEL,
  createdAccounts,
  submitterPayload,
  types,
  type Row,
  type Queryable,
} from "./mapping.js";
import { planTransition } from "../../store/transition-plan.js";
import { INSTANCE_PREFIX, newPgPool, pgClientConfig, type PgLimits } from "./open.js";
import { CheckedClient, checkPoolQueries } from "./checked-client.js";
import type { PgHosts } from "./failover.js";
import { isDatabaseUnavailable } from "../../store/database-health.js";
import { pgAccounts } from "./accounts.js";
import { pgClients } from "./clients.js";
import { CLIENT_CHANGED, ClientChanges } from "../kit/client-changes.js";
import { pgEvents } from "./events.js";
import { fenced, PgLeadership } from "./leadership.js";
import { pgOps } from "./ops.js";
import { pgRateLimits } from "./rate-limits.js";
import { pgSessions } from "./sessions.js";
import { pgTasks } from "./tasks.js";
import { deliveryAttempts } from "./schema.js";
import { chargeInsert, lockCredit, readCredit, recordCharge } from "./credit-books.js";
import type { PendingAttempt, PendingFailure, PgContext } from "./context.js";
import { failuresUpsert } from "./key-health.js";
import { foldStoredBytesLog } from "./stored-bytes-log.js";
import { returnGrants, StoredBytesGrants } from "./stored-bytes-grants.js";
import { NOTIFY_IF_WATCHED, TASK_FOR_CHANGE } from "./watch-barrier.js";
import { pgOutputs } from "./outputs.js";

/**
 * Longest a COMMIT may take before its connection counts as lost (checked-client.ts). A commit
 * waits for the synchronous standby: milliseconds, unless the primary lost it (a standby promoted
 * behind its back), when it would wait for ever.
 */
export const COMMIT_TIMEOUT_MS = 5_000;

export interface PgStoreOptions extends PgLimits {
  connectionString: string;
  /** DATABASE_URL of several hosts: which one takes writes (failover.ts); every connection goes there. */
  hosts?: PgHosts;
  /** Pool size (connections for requests and workers; two more are dedicated to leadership and LISTEN). */
  max?: number;
}

/**
 * The store on PostgreSQL, shared by any number of relay processes. The same operations as
 * SqliteStore, with what sharing needs:
 * - claims take rows with `FOR UPDATE SKIP LOCKED` under a lease and a claim token, so two
 *   instances never claim one row and a crashed instance's rows come back when the lease ends;
 * - a state change locks its task row and never its client's: the client's credit books are
 *   summed on read and the deciders of one client take turns on its credit lock, nothing else
 *   (credit-books.ts); other rows are touched with SKIP LOCKED, never waited on;
 * - each upstream account has one leader (a lease row renewed through a dedicated connection, with
 *   a fence that claims made as leader carry: leadership.ts): only it submits and polls, a frozen
 *   leader loses the account after its lease, and the read budget is also decided in the database,
 *   under the account row's lock, so it holds even while two leaders briefly overlap;
 * - per-key delivery caps count leased events in the database, so they hold across instances;
 * - writes that wake workers send NOTIFY; every instance LISTENs (its idle timer stays the fallback).
 *   A creation on the instance that leads its account nudges its own submitter instead (wakeSubmitter),
 *   and a change that writes an event its own dispatcher, once committed (transitionIn, tx).
 *
 * The pull feed needs no lock here either: an event is written without a feed position, and the
 * feed's reader places committed events after every position handed out before (feed-positions.ts),
 * so a reader never passes an event that is still to commit.
 */
export class PgStore implements Store, PgContext {
  readonly dialect = "postgres" as const;
  readonly pool: pg.Pool;
  readonly tasks: TaskStore;
  readonly events: EventStore;
  readonly keyHealth: KeyHealthStore;
  readonly webhookEndpoints: WebhookEndpointStore;
  readonly notices: NoticeStore;
  readonly clients: ClientStore;
  readonly accounts: AccountStore;
  readonly sessions: SessionStore;
  readonly limits: RateLimitStore;
  readonly ops: OpsStore;
  readonly outputs: OutputStore;
  /** Account leadership: lease rows with fences (leadership.ts). */
  readonly leadership: PgLeadership;
  /** The connections' limits, and their application_name: this store's own, on every connection it opens. */
  readonly connection: PgLimits;
  listener: pg.Client | null = null;
  closed = false;
  private readonly folding: NodeJS.Timeout;
  readonly grants: StoredBytesGrants;
  /** Told of client rows changed here and, through the listener, by other processes (API key caches). */
  readonly clientChanges = new ClientChanges();

  /**
   * One statement's rows, on the pool or inside a transaction's connection. Its values are bound
   * under the store's value rules by the pool and its connections (checked-client.ts), like every
   * other query here: a NUL compared with stored text matches nothing, one to write is refused.
   */
  readonly q = (sql: string, values: unknown[] = [], on: Queryable = this.pool): Promise<Row[]> =>
    on.query(sql, values).then((r) => r.rows as Row[]);
  /** One statement's first row. */
  readonly one = async (sql: string, values: unknown[] = [], on: Queryable = this.pool): Promise<Row | undefined> =>
    (await this.q(sql, values, on))[0];

  constructor(
    readonly options: PgStoreOptions,
    readonly rules: TransitionRules,
  ) {
    this.connection = {
      ...options,
      applicationName: options.applicationName ?? `${INSTANCE_PREFIX}${randomBytes(6).toString("hex")}`,
    };
    // Bounded waits, and no connection that dies (server restart) can crash the process: see open.ts.
    this.pool = newPgPool({
      ...this.clientConfig(),
      max: options.max ?? 10,
      types,
      Client: CheckedClient,
    });
    checkPoolQueries(this.pool);
    this.grants = new StoredBytesGrants(this.pool, this.connection.applicationName!);

    // One file per area, each operation under the contract's name (tasks.ts, events.ts, ...).
    this.tasks = pgTasks(this);
    this.events = pgEvents(this);
    this.keyHealth = pgKeyHealth(this);
    this.webhookEndpoints = pgWebhookEndpoints(this);
    this.notices = pgNoticeStore(this, async () => {
      await this.pool.query("SELECT pg_notify($1, 'dispatcher')", [CHANNEL]);
    });
    this.clients = pgClients(this, this.clientChanges);
    this.accounts = pgAccounts(this);
    this.sessions = pgSessions(this);
    this.limits = pgRateLimits(this);
    this.ops = pgOps(this);
    this.outputs = pgOutputs(this);
    // What triggers logged for clients' stored bytes, folded into client_storage (stored-bytes-log.ts),
    // and what this instance spent of its grants, taken off their rows (stored-bytes-grants.ts).
    this.folding = setInterval(() => {
      void foldStoredBytesLog(this.pool).catch(() => {});
      void this.grants.settleSpent().catch(() => {});
    }, FOLD_EVERY_MS);
    this.folding.unref();
    this.leadership = new PgLeadership({
      connect: () => new CheckedClient({ ...this.clientConfig(), types }),
      applicationName: this.connection.applicationName!,
      releaseLeases: (holder) => this.ops.releaseLeases(holder),
    });
  }

  /** Every connection's settings; with several hosts, each connects to the writable one (checked-client.ts). */
  private clientConfig(): pg.ClientConfig & { hosts?: PgHosts } {
    const { hosts } = this.options;
    if (!hosts) return pgClientConfig(this.options.connectionString, this.connection);
    return { ...pgClientConfig(hosts.address.urlFor(hosts.address.hosts[0]!), this.connection), hosts };
  }

  /** Attempts settling in the same turn of the event loop, written together by flushAttempts. */
  attempts: PendingAttempt[] = [];
  failures: PendingFailure[] = [];

  /**
   * Group commit for delivery attempts: every attempt that settled in the same turn is written by
   * one statement, its own transaction (one round trip, one durable commit): the attempts' multi-row
   * INSERT and each event's update under its lease, as data-modifying CTEs. An event settling twice
   * in one turn starts a second statement (one statement must not update a row twice). Should a
   * statement fail (a value the database refuses slipped past the core's cleaning), each of its
   * records is written again alone, so one bad record never rolls back another's (docs/contract.md, "Bookkeeping").
   */
  async flushAttempts(): Promise<void> {
    const batch = this.attempts;
    this.attempts = [];
    // The keys' health changes queued in the same turn ride with the first statement.
    let failures = this.failures;
    this.failures = [];
    for (const group of eachEventOnce(batch)) {
      const riding = failures;
      failures = [];
      try {
        await this.writeAttempts(this.pool, group, riding);
        for (const b of group) b.resolve();
        for (const f of riding) f.resolve();
      } catch (err) {
        if (group.length === 1 && riding.length === 0) {
          group[0]!.reject(err);
          continue;
        }
        for (const b of group) await this.writeAttempts(this.pool, [b]).then(b.resolve, b.reject);
        for (const f of riding) await this.writeAttempts(this.pool, [], [f]).then(f.resolve, f.reject);
      }
    }
    // No statement to ride (no attempt in the batch): written on their own.
    for (const f of failures) await this.writeAttempts(this.pool, [], [f]).then(f.resolve, f.reject);
  }

  /**
   * One statement: the attempts' rows, each event's patch with its lease released while its token
   * holds, and the keys' failed attempts counted in endpoint_health (one row per key: a statement
   * may not update a row twice, so a key's failures are summed first, in the order they came).
   */
  async writeAttempts(
    c: Queryable,
    batch: Array<{ eventId: string; token: string; attempt: Row; patch: Row }>,
    failures: readonly PendingFailure[] = [],
  ): Promise<void> {
    const values: unknown[] = [];
    const tuples = batch.map(
      ({ attempt }) => `(${ATTEMPT_COLUMNS.map(([key]) => `$${values.push(attempt[key] ?? null)}`).join(", ")})`,
    );
    const updates = batch.map((b, i) => {
      const at = values.length;
      const set = E.set({ ...b.patch, ...RELEASED }, at + 3);
      values.push(b.eventId, b.token, ...set.values);
      return `e${i} AS (UPDATE events SET ${set.sql} WHERE id = $${at + 1} AND claim_token = $${at + 2})`;
    });
    const parts = [
      ...(tuples.length > 0
        ? [
            `a AS (INSERT INTO delivery_attempts (${ATTEMPT_COLUMNS.map(([, name]) => name).join(", ")}) VALUES ${tuples.join(", ")})`,
          ]
        : []),
      ...updates,
      ...(failures.length > 0 ? [failuresUpsert(failures, values)] : []),
    ];
    await c.query(`WITH ${parts.join(", ")} SELECT 1`, values);
  }

  /** Runs `work` in one transaction on one pooled connection; then the nudges it asked for (nudgeOnCommit). */
  async tx<R>(work: (c: pg.PoolClient) => Promise<R>): Promise<R> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    let committed: Set<NudgeTarget> | undefined;
    try {
      await c.query("BEGIN");
      const result = await work(c);
      // Bounded (CheckedClient): a commit that does not return is a lost connection, never a 201.
      await c.query({ text: "COMMIT", query_timeout: COMMIT_TIMEOUT_MS } as pg.QueryConfig);
      committed = this.onCommit.get(c);
      return result;
    } catch (err) {
      // A connection that cannot even roll back (lost, timed out) is thrown away, not pooled again;
      // so is one to a server that refused the write as read-only (a failover demoted it).
      if (isDatabaseUnavailable(err)) broken = err instanceof Error ? err : new Error(String(err));
      await c.query("ROLLBACK").catch((e: unknown) => {
        broken = e instanceof Error ? e : new Error(String(e));
      });
      throw err;
    } finally {
      this.onCommit.delete(c);
      c.release(broken);
      // After the commit, so a loop woken here sees what it wrote.
      if (committed) for (const target of committed) this.localNudge?.(target);
    }
  }

  /** Loops of this process to nudge once the transaction on `c` commits (tx), nothing if it rolls back. */
  private readonly onCommit = new WeakMap<pg.PoolClient, Set<NudgeTarget>>();

  private nudgeOnCommit(c: pg.PoolClient, target: NudgeTarget): void {
    const targets = this.onCommit.get(c);
    if (targets) targets.add(target);
    else this.onCommit.set(c, new Set([target]));
  }

  /** Whether this process's loops run and listen: a wake-up for them is a local nudge, not a NOTIFY. */
  private wakesHere(): boolean {
    return this.localNudge !== undefined && this.listener !== null;
  }

  /** The state change of TaskStore.transition inside `c`'s transaction; `locked`: the row as already read FOR UPDATE. */
  async transitionIn(
    c: pg.PoolClient,
    id: string,
    patch: Partial<NewTaskRow>,
    o: TransitionOptions,
    locked?: TaskRow,
  ): Promise<TaskRow | undefined> {
    const before = locked ?? (await this.lockTask(c, id));
    if (!before || (o.token && before.claimToken !== o.token)) return undefined;
    // Planned once (store/transition-plan.ts), applied here; the row is locked, so the plan's row is the stored one.
    // A change of status writes an event: the client's endpoints decide which types are written and who gets them.
    const endpoints =
      patch.status !== undefined && patch.status !== before.status
        ? await endpointsOf(c, this.q, before.clientId)
        : undefined;
    const plan = planTransition(this.rules, before, patch, o, subscribedTypes(endpoints ?? []));
    const { clientId } = plan.after;
    // One statement for the whole plan, in its order: the task row, its charge, the client's woken
    // tasks, the price it taught, its outbox event (data-modifying CTEs, each run once; none reads
    // another's rows). Its snapshot is taken after TASK_FOR_CHANGE's watch locks (watch-barrier.ts).
    // Requests held by Prefer: wait and event streams on other instances read the task again
    // (streams of its client and of its account's queue too): told at commit, only when one may be
    // held, with no wake-up lost (NOTIFY_IF_WATCHED; its $1–$3).
    const notify = plan.after.status !== before.status || plan.after.phase !== before.phase;
    const values: unknown[] = notify ? [CHANNEL, taskChangedPayload(plan.after), clientId] : [];
    /** A value's parameter number in `values`. */
    const bind = (v: unknown) => values.push(v);
    const steps: string[] = [];
    const set = T.set(plan.patch, values.length + 2);
    if (set.sql) {
      const idAt = bind(id);
      values.push(...set.values);
      steps.push(`UPDATE tasks SET ${set.sql} WHERE id = $${idAt}`);
    }
    const charge = plan.credit && chargeInsert(clientId, id, plan.credit, o.now, (v) => `$${bind(v)}`);
    if (charge) steps.push(charge);
    if (plan.wake) {
      // Rows another transaction holds are being changed by it anyway: skipped, never waited on (no
      // deadlock). This task is left out: one statement must not change a row twice.
      const now = bind(o.now);
      steps.push(`UPDATE tasks SET next_run_at = $${now} WHERE id IN (SELECT id FROM tasks WHERE client_id = $${bind(clientId)}
        AND phase = 'waiting' AND submit_attempts = 0 AND next_run_at > $${now} AND id <> $${bind(id)}
        AND ${unclaimed(now)} FOR UPDATE SKIP LOCKED)`);
    }
    if (plan.learn) {
      // Written only when the price changes: a model's completions all teach the same price, and an
      // upsert of it by each would take the row's lock to commit, one completion after another.
      const [key, points] = [bind(plan.learn.priceKey), bind(plan.learn.points)];
      steps.push(`INSERT INTO learned_prices (price_key, points, updated_at)
          SELECT $${key}::text, $${points}::bigint, $${bind(o.now)}::bigint
          WHERE NOT EXISTS (SELECT 1 FROM learned_prices WHERE price_key = $${key} AND points = $${points})
        ON CONFLICT (price_key) DO UPDATE SET points = EXCLUDED.points, updated_at = EXCLUDED.updated_at`);
    }
    const told: string[] = notify ? [`(${NOTIFY_IF_WATCHED})`] : [];
    if (plan.event) {
      // No feed position yet (client_seq 0): the feed's reader hands it out (feed-positions.ts), so
      // the event takes no lock on its client.
      const ins = E.insert("events", { ...plan.event, clientSeq: 0 }, values.length + 1);
      values.push(...ins.values);
      steps.push(ins.sql);
      // The dispatchers' wake-up: this process's own after the commit when its loops run here,
      // no NOTIFY (whose queue lock every committing instance takes); else NOTIFY at commit.
      if (this.wakesHere()) this.nudgeOnCommit(c, "dispatcher");
      else told.push(`pg_notify($${bind(CHANNEL)}, 'dispatcher')`);
    }
    if (steps.length > 0 || told.length > 0) {
      const main = `SELECT ${told.length > 0 ? told.join(", ") : "1"}`;
      await c.query(
        steps.length > 0 ? `WITH ${steps.map((step, i) => `s${i} AS (${step})`).join(", ")} ${main}` : main,
        values,
      );
    }
    if (plan.event) await fanOutEvent(c, this.q, plan.event, endpoints);
    return plan.after;
  }

  async lockTask(c: pg.PoolClient, id: string): Promise<TaskRow | undefined> {
    const r = (await c.query(`${TASK_FOR_CHANGE} FOR UPDATE OF t`, [id])).rows[0] as Row | undefined;
    return r ? T.row(r) : undefined;
  }

  async updateLeased(
    c: Queryable,
    id: string,
    token: string,
    patch: Partial<NewTaskRow>,
  ): Promise<TaskRow | undefined> {
    const set = T.set(patch, 3);
    const r = (
      await c.query(`UPDATE tasks SET ${set.sql} WHERE id = $1 AND claim_token = $2 RETURNING *`, [
        id,
        token,
        ...set.values,
      ])
    ).rows[0] as Row | undefined;
    return r ? T.row(r) : undefined;
  }

  async updateLeasedEvent(c: Queryable, id: string, token: string, patch: Row): Promise<void> {
    const set = E.set(patch, 3);
    await c.query(`UPDATE events SET ${set.sql} WHERE id = $1 AND claim_token = $2`, [id, token, ...set.values]);
  }

  /**
   * Claims tasks matching `where` ($1 lease end, $2 token, $3 now, $4… extra) with SKIP LOCKED; a
   * claim made as an account's leader takes nothing once its fence is stale (leadership.ts).
   */
  async claimTasks(
    where: string,
    extra: unknown[],
    o: { now: number; leaseMs: number; token: string; limit: number; fence?: LeaderFence | undefined },
    order = "",
  ): Promise<TaskRow[]> {
    if (o.limit <= 0) return [];
    const limitParam = 4 + extra.length;
    const fence = o.fence ? ` AND ${fenced(limitParam + 1, limitParam + 2)}` : "";
    const rows = await this.pool.query(
      `UPDATE tasks SET claimed_until = $1, claim_token = $2
       WHERE id IN (SELECT id FROM tasks WHERE ${where} AND ${unclaimed(3)}${fence} ${order} LIMIT $${limitParam} FOR UPDATE SKIP LOCKED)
       RETURNING *`,
      [o.now + o.leaseMs, o.token, o.now, ...extra, o.limit, ...(o.fence ? [o.fence.account, o.fence.fence] : [])],
    );
    return T.rows(rows.rows as Row[]);
  }

  /** The client's credit position (credit-books.ts); with `lock`, under its credit lock. */
  async creditPositionIn(c: Queryable, clientId: string, lock: boolean): Promise<CreditPosition | undefined> {
    if (lock) await lockCredit(c, clientId);
    return (await readCredit(c, this.pool, clientId, null))?.position;
  }

  async learnedPriceIn(c: Queryable, priceKey: string): Promise<number | null> {
    const r = (await c.query("SELECT points FROM learned_prices WHERE price_key = $1", [priceKey])).rows[0] as
      | Row
      | undefined;
    return r ? Number(r.points) : null;
  }

  /** A charge or refund as a ledger row; the reservation is on the task row (credit-books.ts). */
  async applyCredits(
    c: Queryable,
    clientId: string,
    taskId: string,
    change: { charged: number; refunded: number; reserved: number },
    at: number,
  ): Promise<void> {
    await recordCharge(c, clientId, taskId, change, at);
  }

  /** See OpsStore.leases and leadership.ts. */
  leases(as: LeaderLease): Promise<{ account: string; takeable: boolean }[]> {
    return this.leadership.leases(as.holder);
  }

  /** See OpsStore.leads and leadership.ts. */
  leads(account: string, as: LeaderLease): Promise<LeaderFence | null> {
    return this.closed ? Promise.resolve(null) : this.leadership.leads(account, as);
  }

  /** The nudge of this process's workers, once they listen (wakeSubmitter). */
  private localNudge: ((target: NudgeTarget, created?: readonly string[]) => void) | undefined;

  async wakeSubmitter(accounts: Iterable<string>, created = false): Promise<void> {
    const list = [...accounts];
    if (this.submitterHere(list)) this.localNudge!("submitter", created ? list : undefined);
    else await this.pool.query("SELECT pg_notify($1, $2)", [CHANNEL, submitterPayload(list, created)]);
  }

  submitterHere(accounts: Iterable<string>): boolean {
    if (!this.wakesHere()) return false;
    for (const account of accounts) if (!this.leadership.holds(account)) return false;
    return true;
  }

  /**
   * One dedicated LISTEN session, opened again 1 s after it is lost (a server restart, a failover,
   * pg_terminate_backend). What was notified while no one listened was not heard: once the session
   * is back, every loop is nudged, every client's cached key is dropped and `resynced` tells every
   * watcher (held waits, event streams) to read its state once more, so no wake-up is lost.
   */
  async listen(
    nudge: (target: NudgeTarget, created?: readonly string[]) => void,
    taskChanged?: TaskChanged,
    resynced?: () => void,
  ): Promise<void> {
    this.localNudge = nudge;
    if (this.listener || this.closed) return;
    const reopening = this.listenedBefore;
    this.listenedBefore = true;
    const client = new CheckedClient(this.clientConfig());
    const reconnect = () => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => {});
      // The idle wake-up covers the gap; listen again shortly.
      if (!this.closed)
        setTimeout(() => void this.listen(nudge, taskChanged, resynced).catch(() => {}), LISTEN_RETRY_MS).unref();
    };
    client.on("error", reconnect);
    client.on("end", reconnect);
    client.on("notification", (n) => {
      const created = n.payload ? createdAccounts(n.payload) : null;
      if (created) nudge("submitter", created);
      else if (n.payload === "submitter" || n.payload === "poller" || n.payload === "dispatcher") nudge(n.payload);
      else if (n.payload?.startsWith(TASK_CHANGED)) {
        const [taskId = "", clientId, account] = n.payload.slice(TASK_CHANGED.length).split(" ");
        taskChanged?.(taskId, clientId, account === undefined ? undefined : decodeURIComponent(account));
      } else if (n.payload?.startsWith(CLIENT_CHANGED)) this.clientChanges.emit(n.payload.slice(CLIENT_CHANGED.length));
    });
    this.listener = client;
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      // A session that never opened is retried like one that was lost (the server is still away).
      reconnect();
      throw err;
    }
    // Changes made while no one listened (before, or between two connections) were not heard.
    this.clientChanges.emit(null);
    if (reopening) {
      for (const target of ["submitter", "poller", "dispatcher"] as const) nudge(target);
      resynced?.();
    }
  }

  /** Whether a LISTEN session was tried before: the next one to open is a re-open (see listen). */
  private listenedBefore = false;

  /** Shutdown paths may both close: the second call waits for the first, it never ends the pool again. */
  private closing: Promise<void> | undefined;
  close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    this.closed = true;
    clearInterval(this.folding);
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => {});
    await this.leadership.close();
    // Room granted to this instance goes back to its clients (stored-bytes-grants.ts).
    await returnGrants(this.pool, this.grants.holder).catch(() => {});
    await this.pool.end();
    this.options.hosts?.close();
  }
}

const ATTEMPT_COLUMNS = columnsOf(deliveryAttempts);
/** How often each instance folds the stored-bytes log: its rows per client stay few between two folds. */
const FOLD_EVERY_MS = 2_000;
/** How long after a lost LISTEN session the next is opened. */
const LISTEN_RETRY_MS = 1_000;
/**
 * A NOTIFY payload naming a task whose status or phase changed: the prefix, the id, its client and
 * its upstream account (URI-encoded), space-separated; nothing of its content.
 */
const TASK_CHANGED = "task:";
const taskChangedPayload = (t: TaskRow) =>
  `${TASK_CHANGED}${t.id} ${t.clientId} ${encodeURIComponent(t.upstreamAccount)}`;

/** A batch in runs where no event appears twice, in order (an event's records keep their order). */
function eachEventOnce<B extends { eventId: string }>(batch: B[]): B[][] {
  const runs: B[][] = [];
  let run: B[] = [];
  let ids = new Set<string>();
  for (const b of batch) {
    if (ids.has(b.eventId)) {
      runs.push(run);
      run = [];
      ids = new Set();
    }
    run.push(b);
    ids.add(b.eventId);
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

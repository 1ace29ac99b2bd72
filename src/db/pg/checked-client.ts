import pg from "pg";
import { bindValues, type Plan } from "../kit/bound-values.js";
import { planOf } from "./bound-values.js";
import type { PgHosts } from "./failover.js";

/**
 * PostgreSQL's side of the store's value rules (src/db/kit/bound-values.ts): every statement's values
 * are bound under them, on the pool (before a connection is taken, so a refused value costs none)
 * and on every connection (transactions), the same rules SQLite's statement wrapper applies.
 */

/** Plans by statement text; multi-row INSERTs of varying width make some texts one-off, hence a bound. */
const plans = new Map<string, Plan>();
const PLANS_KEPT = 500;
/** Value arrays already bound (by the pool, then seen again by its connection). */
const bound = new WeakSet<unknown[]>();

function planFor(sql: string): Plan {
  let plan = plans.get(sql);
  if (!plan) {
    plan = planOf(sql);
    if (plans.size >= PLANS_KEPT) plans.delete(plans.keys().next().value!);
    plans.set(sql, plan);
  }
  return plan;
}

/** `values` for `sql` under the rules; throws StoreValueError for a value the store refuses. */
export function bindPg(sql: string, values: unknown[]): unknown[] {
  if (values.length === 0 || bound.has(values)) return values;
  const out = bindValues(planFor(sql), values, "postgres");
  bound.add(out);
  return out;
}

type Query = (...args: unknown[]) => unknown;

/** A query call's arguments with their values bound; a refusal answers the way the call expects (its callback, or a rejected promise). */
export function checkedQuery(native: Query, self: unknown, args: unknown[]): unknown {
  const [first, second] = args;
  try {
    if (typeof first === "string" && Array.isArray(second)) args[1] = bindPg(first, second);
    else if (
      first !== null &&
      typeof first === "object" &&
      typeof (first as pg.QueryConfig).text === "string" &&
      Array.isArray((first as pg.QueryConfig).values)
    ) {
      args[0] = { ...first, values: bindPg((first as pg.QueryConfig).text, (first as pg.QueryConfig).values!) };
    }
  } catch (err) {
    const callback = args.find((a) => typeof a === "function") as ((e: unknown) => void) | undefined;
    if (!callback) return Promise.reject(err);
    process.nextTick(() => callback(err));
    return undefined;
  }
  return native.apply(self, args);
}

type Callback = (err: Error | null, result?: unknown) => void;

/** node-postgres's error for a statement that did not answer within its query_timeout. */
const READ_TIMEOUT = "Query read timeout";
/**
 * PostgreSQL's warning when a commit's wait for the synchronous standby was cancelled (a cancel
 * request, an operator's pg_cancel_backend): the commit then reports success, yet the transaction
 * is on this server only and a promoted standby would not have it.
 */
const UNREPLICATED = /^canceling (the )?wait for synchronous replication/;

/**
 * The pool's connection class: every query, transactions included, binds under the rules. With a
 * DATABASE_URL of several hosts (config `hosts`, failover.ts) it connects to the writable one,
 * waiting for one up to its connect timeout while a failover is under way.
 *
 * A statement that does not answer within its bound is a lost connection, not a slow one: the
 * socket is destroyed (node-postgres would keep the connection, every later statement queued behind
 * the one that never answers), so the pool drops it and, with several hosts, the writable one is
 * looked for again. That is how a primary that lost its synchronous standby is left: its commits
 * wait for ever, and are never acknowledged. A commit that reports success only after its wait for
 * the standby was cancelled is refused the same way (UNREPLICATED): acknowledged means replicated.
 */
export class CheckedClient extends pg.Client {
  private readonly hosts: PgHosts | undefined;
  private readonly waitForHostMs: number;
  private unreplicated: Error | undefined;

  constructor(config: pg.ClientConfig & { hosts?: PgHosts } = {}) {
    super(config);
    this.hosts = config.hosts;
    this.waitForHostMs = config.connectionTimeoutMillis ?? 5_000;
    this.on("notice", (notice: { message?: string }) => {
      if (!UNREPLICATED.test(notice.message ?? "")) return;
      this.unreplicated = Object.assign(
        new Error("PostgreSQL committed without its synchronous standby's confirmation: not acknowledged"),
        { code: "08006" },
      );
    });
  }

  override query(...args: unknown[]): never {
    if (typeof (args[0] as { submit?: unknown } | null)?.submit === "function")
      return checkedQuery(super.query as Query, this, args) as never;
    // Every call in callback form, so that the guard sees each answer before the caller does.
    const at = args.findIndex((a) => typeof a === "function");
    let reply = at >= 0 ? (args[at] as Callback) : undefined;
    const answer = reply
      ? undefined
      : new Promise((resolve, reject) => {
          reply = (err, result) => (err ? reject(err) : resolve(result));
        });
    args[at >= 0 ? at : args.length] = (err: Error | null, result?: unknown) => {
      const refused = err ?? this.unreplicated;
      if (refused && (refused === this.unreplicated || refused.message === READ_TIMEOUT)) this.lose();
      reply!(refused ?? null, refused ? undefined : result);
    };
    const returned = checkedQuery(super.query as Query, this, args);
    return (answer ?? returned) as never;
  }

  /** Ends the connection at once, whatever it was waiting for (see the class comment). */
  private lose(): void {
    (this as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
  }

  override connect(callback?: any): any {
    const hosts = this.hosts;
    if (!hosts) return callback ? super.connect(callback) : super.connect();
    const connected = hosts.writable(this.waitForHostMs).then((host) => {
      this.host = host.host;
      this.port = host.port;
      hosts.track(this as pg.Client, host);
      return super.connect();
    });
    if (!callback) return connected;
    connected.then(() => callback(null, this), callback);
    return undefined;
  }
}

/** Checks a pool's own `query` before it takes a connection for it. */
export function checkPoolQueries(pool: pg.Pool): void {
  const native = pool.query as Query;
  (pool as unknown as { query: Query }).query = (...args: unknown[]) => checkedQuery(native, pool, args);
}

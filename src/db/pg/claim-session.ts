import type pg from "pg";
import { deliveryKey } from "../../store/delivery-key.js";
import { EVENT_CLAIM_LOCK, type Row } from "./mapping.js";

/** How long the claims' lock is kept after a claim while this store claims nothing more. */
const IDLE_MS = 20;

/**
 * The longest a held claims' session may sit idle on the server before the server ends it (and so
 * releases the lock): a frozen process holding the lock (SIGSTOP, a stalled VM) stops every
 * instance's claims no longer than this. Live, the session is idle IDLE_MS at most.
 */
const FROZEN_HOLDER_MS = 10_000;

const LOCK = `${EVENT_CLAIM_LOCK}, 1`;
/**
 * The lock, and the session's settings while it holds it: each claim statement is prepared once on
 * the session and planned once (generic plans: a custom plan per call costs about 0.7 ms of
 * planning, more than the claim itself), and idle_session_timeout (from PostgreSQL 14). The
 * settings the connection had are read first, and put back before it returns to the pool.
 */
const ACQUIRE = `SELECT current_setting('plan_cache_mode') AS plan_cache_mode, current_setting('idle_session_timeout', true) AS idle_session_timeout;
  SELECT pg_advisory_lock(${LOCK}), set_config('plan_cache_mode', 'force_generic_plan', false),
    CASE WHEN current_setting('idle_session_timeout', true) IS NOT NULL THEN set_config('idle_session_timeout', '${FROZEN_HOLDER_MS}', false) END`;
/** $1 plan_cache_mode, $2 idle_session_timeout as they were (null: the server has none). */
const RELEASE = `SELECT pg_advisory_unlock(${LOCK}), set_config('plan_cache_mode', $1, false),
  CASE WHEN $2::text IS NOT NULL THEN set_config('idle_session_timeout', $2, false) END`;

/** Whether another session waits for the claims' lock: read by every claim statement (about 0.2 ms), as its column `claims_waiting`. */
const CLAIMS_WAITING = `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
  AND classid = ${EVENT_CLAIM_LOCK} AND objid = 1 AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`;

/**
 * A claim statement: `ctes` end with `claimed`, the leasing UPDATE … RETURNING *. It answers the
 * claimed rows and whether another session waits for the lock, in one row at least (its event
 * columns null when nothing was claimed); `extra` columns come from `from`, a one-row source.
 */
export const claimStatement = (ctes: string, extra = "", from = "(SELECT 1) one") =>
  `WITH ${ctes} SELECT claimed.*, ${extra}${CLAIMS_WAITING} AS claims_waiting FROM ${from} LEFT JOIN claimed ON true`;

/** A claim statement's answer: the claimed rows, and whether the lock is to be handed over. */
export interface Claimed {
  rows: Row[];
  waiting: boolean;
}
export const claimedOf = (answer: Row[]): Claimed => ({
  rows: answer.filter((r) => r.seq !== null),
  waiting: answer[0]?.claims_waiting === true,
});

interface Lease {
  key: string;
  token: string;
  until: number;
}

/**
 * Event claims of one PgStore, under the claims' advisory lock held across claims (a tenure).
 *
 * The per-key cap holds across instances because every claim, by any instance, runs under one
 * lock and counts the key's leased events before taking more. Counting walks every pending event
 * of the key (no index holds claimed_until): milliseconds with a backlog of thousands, at every
 * claim. The lock is therefore kept between claims, at session level on one pooled connection
 * that runs every claim of this store, and handed over as soon as a claim statement sees another
 * session waiting for it, or after IDLE_MS without a claim. While it is held, no other session
 * can lease an event (claimDue, claimOfKey and claimTrial all take it), so the other sessions'
 * leases of a key, counted once in the tenure, can only end: with none counted, the key's room is
 * the cap less this store's own leases, known here, and the claim is one statement with no count
 * and no transaction around it. A key where other sessions hold leases is counted at every claim.
 *
 * This store's own leases are an upper bound: added when a claim returns them, removed when their
 * write (attempt record, release, re-queue) has succeeded or when they expire; one ended by someone
 * else stays counted until then, which only leaves a slot unused for that while.
 */
export class ClaimSession {
  private client: pg.PoolClient | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private idle: NodeJS.Timeout | null = null;
  /** The connection's settings before this tenure changed them (see ACQUIRE). */
  private settings: Array<string | null> = [];
  /** Claims run so far: an idle release scheduled before the latest claim does nothing. */
  private runs = 0;
  /** Per key, the other sessions' leases counted in this tenure (cleared when the lock is let go). */
  private readonly others = new Map<string, number>();
  private readonly own = new Map<string, Lease>();

  constructor(private readonly pool: pg.Pool) {}

  /**
   * Runs `work` on the claims' connection, under the lock (taken first if this store does not hold
   * it); one at a time. `work` answers its result and what its claim statement said of waiters
   * (undefined when it ran none).
   */
  run<R>(work: (c: pg.PoolClient) => Promise<{ result: R; waiting?: boolean }>): Promise<R> {
    const next = this.queue.then(() => this.runNow(work));
    this.queue = next.catch(() => {});
    return next;
  }

  private async runNow<R>(work: (c: pg.PoolClient) => Promise<{ result: R; waiting?: boolean }>): Promise<R> {
    this.runs += 1;
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    try {
      if (!this.client) {
        const c = await this.pool.connect();
        this.client = c;
        const [before] = (await c.query(ACQUIRE)) as unknown as pg.QueryResult[];
        this.settings = [before!.rows[0].plan_cache_mode, before!.rows[0].idle_session_timeout];
      }
      const { result, waiting } = await work(this.client);
      if (waiting) await this.release();
      else this.releaseWhenIdle();
      return result;
    } catch (err) {
      // The lock's state is unknown after a failure: the connection is thrown away, which releases it.
      this.drop(err);
      throw err;
    }
  }

  private releaseWhenIdle(): void {
    const at = this.runs;
    this.idle = setTimeout(() => {
      this.idle = null;
      this.queue = this.queue.then(() => (this.runs === at ? this.release() : undefined));
    }, IDLE_MS);
    this.idle.unref();
  }

  /** Hands the lock over and the connection back to the pool (inside the queue). */
  private async release(): Promise<void> {
    const c = this.client;
    if (!c) return;
    this.client = null;
    this.others.clear();
    try {
      await c.query(RELEASE, this.settings);
      c.release();
    } catch (err) {
      c.release(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private drop(err: unknown): void {
    const c = this.client;
    this.client = null;
    this.others.clear();
    c?.release(err instanceof Error ? err : new Error(String(err)));
  }

  /** Lets the lock go and returns the connection (the store closes). */
  async close(): Promise<void> {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    this.queue = this.queue.then(() => this.release());
    await this.queue;
  }

  /** A key's leased events as far as this tenure knows without counting: this store's own, when no other session's were found. */
  knownLeased(key: string, now: number): number | undefined {
    return this.others.get(key) === 0 ? this.ownOf(key, now).length : undefined;
  }

  /** A key's leases counted in this tenure: `leased` in all, `own` of them this store's. */
  counted(key: string, leased: number, own: number): void {
    this.others.set(key, leased - own);
  }

  /** Tokens of this store's leases of a key at `now` (expired ones forgotten), or of every key. */
  ownOf(key: string | null, now: number): string[] {
    const tokens: string[] = [];
    for (const [id, lease] of this.own) {
      if (lease.until < now) this.own.delete(id);
      else if (key === null || lease.key === key) tokens.push(lease.token);
    }
    return tokens;
  }

  /** Rows a claim returned (events columns): now leased by this store. */
  leased(rows: Row[]): void {
    for (const r of rows) {
      this.own.set(r.id as string, {
        key: deliveryKey(r.client_id as string, r.destination_host as string),
        token: r.claim_token as string,
        until: Number(r.claimed_until),
      });
    }
  }

  /** A lease's write succeeded (attempt record, release, re-queue): it no longer holds, whether its token still matched or not. */
  ended(eventId: string, token?: string): void {
    const lease = this.own.get(eventId);
    if (lease && (token === undefined || lease.token === token)) this.own.delete(eventId);
  }
}

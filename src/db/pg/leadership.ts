import { performance } from "node:perf_hooks";
import type pg from "pg";
import type { LeaderFence, LeaderLease } from "../../store/store.js";
import type { Row } from "./mapping.js";
import { INSTANCE_PREFIX } from "./open.js";

/** The database's clock in epoch milliseconds: every lease is timed by it, so instances' clocks may differ. */
export const DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/**
 * The fence condition a claim made as leader adds ($a the account, $f its fence): the account's
 * lease still has this fence and has not lapsed. A process frozen past its lease and resumed claims
 * nothing, whether or not another has taken the account yet.
 */
export const fenced = (account: number, fence: number) =>
  `EXISTS (SELECT 1 FROM account_leaders WHERE account = $${account} AND fence = $${fence} AND expires_at > ${DB_NOW_MS})`;

/** The lease row's holder is alive as far as the server knows: its leader connection's backend still runs. */
const HOLDER_ALIVE = "EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.holder_pid)";

/** Who holds the account, and whether another may take it now ($1 account, $2 holder asking). */
const LOOK = `SELECT l.holder, l.fence, l.expires_at <= ${DB_NOW_MS} OR l.holder = $2 OR NOT ${HOLDER_ALIVE} AS takeable
  FROM account_leaders l WHERE l.account = $1`;

/**
 * Takes the account ($1) for $2 with a lease of $3 ms, fence one higher, if its lease lapsed, its
 * holder's backend is gone or it is $2's own: INSERT … ON CONFLICT DO UPDATE decides on the latest
 * row under its lock, so of two processes taking at once one gets it. Answers the new fence, and
 * the previous holder as this statement's snapshot saw it (whose leases are then released) with the
 * application_name of its leader connection while that still runs (a frozen process's).
 */
const TAKE = `WITH prev AS (SELECT holder, (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = account_leaders.holder_pid) AS app
    FROM account_leaders WHERE account = $1),
  taken AS (
    INSERT INTO account_leaders AS l (account, holder, fence, expires_at, holder_pid, taken_at)
    VALUES ($1, $2, 1, ${DB_NOW_MS} + $3, pg_backend_pid(), ${DB_NOW_MS})
    ON CONFLICT (account) DO UPDATE SET holder = EXCLUDED.holder, fence = l.fence + 1, expires_at = EXCLUDED.expires_at,
      holder_pid = EXCLUDED.holder_pid, taken_at = EXCLUDED.taken_at
    WHERE l.expires_at <= EXCLUDED.taken_at OR l.holder = EXCLUDED.holder OR NOT ${HOLDER_ALIVE}
    RETURNING l.fence)
  SELECT taken.fence, prev.holder AS previous, prev.app AS previous_app FROM taken LEFT JOIN prev ON true`;

/**
 * Ends every session of a previous leader's process ($1, its application_name) in this database:
 * its open transactions (their row locks, which its other transactions would take in turn, each
 * after its own idle-in-transaction timeout), the claims' lock, and its connections, so that what
 * it writes once resumed goes through new connections, under the fences and claim tokens.
 */
const END_SESSIONS = `SELECT count(pg_terminate_backend(pid)) AS ended FROM pg_stat_activity
  WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()`;

/**
 * Every account's lease as $1 sees it: takeable when the lease lapsed, its holder's leader
 * connection is gone, or it is $1's own (a row this process no longer counts as held). One look at
 * the whole (small) table, so an instance watches every account's leader in one statement.
 */
const LEASES = `SELECT l.account, l.expires_at <= ${DB_NOW_MS} OR l.holder = $1 OR NOT ${HOLDER_ALIVE} AS takeable
  FROM account_leaders l`;

/** Extends $1's leases whose fence is still the one it holds ($3 accounts, $4 fences) by $2 ms; answers the accounts kept. */
const RENEW = `UPDATE account_leaders l SET expires_at = ${DB_NOW_MS} + $2, holder_pid = pg_backend_pid()
  FROM unnest($3::text[], $4::bigint[]) AS h(account, fence)
  WHERE l.account = h.account AND l.fence = h.fence AND l.holder = $1
  RETURNING l.account`;

/** Gives $1's leases up ($2 accounts, $3 fences): lapsed at once, the fence kept (it only grows). */
const RESIGN = `UPDATE account_leaders l SET expires_at = 0
  FROM unnest($2::text[], $3::bigint[]) AS h(account, fence)
  WHERE l.account = h.account AND l.fence = h.fence AND l.holder = $1`;

interface Held {
  fence: number;
  /** Until when (performance.now()) this process may act as leader without renewing. */
  validUntil: number;
}

export interface PgLeadershipDeps {
  /** A new dedicated connection (not pooled), not yet connected. */
  connect: () => pg.Client;
  /** This store's application_name (every connection of it has it). */
  applicationName: string;
  /** Releases the task and event leases whose tokens start with `<holder>:` (a previous leader's). */
  releaseLeases: (holder: string) => Promise<number>;
}

/**
 * Account leadership on PostgreSQL: a lease row per account (account_leaders) on the database's
 * clock, held through one dedicated connection. See docs/decisions/0010-leadership-and-fencing.md.
 *
 * - A leader renews all its leases together every third of the lease, in the background. It acts
 *   as leader only while its own monotonic clock says the last renewal it sent is younger than the
 *   lease (less a margin): a renewal is stamped by the server after it was sent, so the process
 *   stops believing it leads before any other process can take over. A process frozen (SIGSTOP, a
 *   stalled event loop, a dead network) renews nothing: after the lease, another takes the account.
 * - Each change of leader raises the account's fence. Claims made as leader carry it (fenced()), so
 *   a resumed process whose lease lapsed claims nothing; the task writes that follow a claim are
 *   guarded by its claim token, and the new leader releases the previous holder's leases when it
 *   takes over, so those late writes find another token (or none) and change nothing.
 * - A holder whose connection is gone (a kill -9, a lost network once the server notices) is taken
 *   over at once: its backend pid no longer runs. A holder whose lease lapsed while its connection
 *   still runs has stopped making progress: the new leader ends all its sessions (END_SESSIONS).
 *   close() gives the leases up.
 */
export class PgLeadership {
  private client: pg.Client | null = null;
  private readonly held = new Map<string, Held>();
  private lease: LeaderLease | null = null;
  private renewing: Promise<void> | null = null;
  /** Takes in flight, per account: callers asking at once (the submitter and the poller) share one. */
  private readonly taking = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly deps: PgLeadershipDeps) {}

  /** See OpsStore.leads. */
  async leads(account: string, as: LeaderLease): Promise<LeaderFence | null> {
    if (this.closed) return null;
    if (this.lease && this.lease.holder !== as.holder) this.dropAll();
    this.lease = as;
    if (!this.valid(account)) {
      if (this.held.has(account)) await this.renew();
      if (!this.valid(account)) await this.takeOnce(account, as);
    }
    const held = this.held.get(account);
    return held && this.valid(account) ? { account, fence: held.fence } : null;
  }

  /** Whether this process leads `account` now, without asking the database (a lease it holds, still valid). */
  holds(account: string): boolean {
    return !this.closed && this.valid(account);
  }

  /**
   * Every account's lease but those this process holds: whether `holder` could take it now (see
   * LEASES). What an instance asks every few seconds instead of one look per account
   * (src/workers/leadership.ts).
   */
  async leases(holder: string): Promise<{ account: string; takeable: boolean }[]> {
    if (this.closed) return [];
    const client = await this.connection();
    const rows = (await client.query(LEASES, [holder])).rows as Row[];
    return rows
      .map((r) => ({ account: r.account as string, takeable: r.takeable === true }))
      .filter((l) => !this.valid(l.account));
  }

  /** Gives every lease up (the process stops), so others take over at once, and ends the connection. */
  async close(): Promise<void> {
    this.closed = true;
    this.stopTimer();
    const client = this.client;
    const lease = this.lease;
    const held = [...this.held];
    this.held.clear();
    this.client = null;
    if (client && lease && held.length > 0) {
      await client.query(RESIGN, [lease.holder, held.map(([a]) => a), held.map(([, h]) => h.fence)]).catch(() => {});
    }
    await client?.end().catch(() => {});
  }

  private valid(account: string): boolean {
    const held = this.held.get(account);
    return held !== undefined && performance.now() < held.validUntil;
  }

  /** One take of the account at a time: two at once would both win, the second raising this process's own fence. */
  private takeOnce(account: string, as: LeaderLease): Promise<void> {
    let taking = this.taking.get(account);
    if (!taking) {
      taking = this.take(account, as).finally(() => this.taking.delete(account));
      this.taking.set(account, taking);
    }
    return taking;
  }

  private async take(account: string, as: LeaderLease): Promise<void> {
    try {
      const client = await this.connection();
      const look = (await client.query(LOOK, [account, as.holder])).rows[0] as Row | undefined;
      if (look && look.takeable !== true) return;
      const sentAt = performance.now();
      const taken = (await client.query(TAKE, [account, as.holder, as.leaseMs])).rows[0] as Row | undefined;
      if (!taken) return;
      this.held.set(account, { fence: Number(taken.fence), validUntil: sentAt + validFor(as.leaseMs) });
      this.startTimer();
      const previous = taken.previous as string | null;
      if (previous && previous !== as.holder)
        await this.endPrevious(client, previous, taken.previous_app as string | null);
    } catch {
      this.dropAll();
    }
  }

  /**
   * The previous holder stopped renewing (frozen, stalled, cut off) or died: a process still
   * connected has its sessions ended, then its claims are released now rather than when each lease
   * ends, so its late writes under them change nothing. Either may fail (no right to end another
   * role's sessions; a lock the release waits on): the leases then end by themselves, and the
   * account stays taken.
   */
  private async endPrevious(client: pg.Client, holder: string, app: string | null): Promise<void> {
    if (app?.startsWith(INSTANCE_PREFIX) && app !== this.deps.applicationName)
      await client.query(END_SESSIONS, [app]).catch(() => {});
    await this.deps.releaseLeases(holder).catch(() => {});
  }

  /** Renews every lease held, in one statement; one renewal at a time (a caller arriving meanwhile waits for it). */
  private renew(): Promise<void> {
    this.renewing ??= this.renewOnce().finally(() => {
      this.renewing = null;
    });
    return this.renewing;
  }

  private async renewOnce(): Promise<void> {
    const lease = this.lease;
    if (!lease || this.held.size === 0 || this.closed) return;
    const held = [...this.held];
    try {
      const client = await this.connection();
      const sentAt = performance.now();
      const kept = new Set(
        (
          (await client.query(RENEW, [lease.holder, lease.leaseMs, held.map(([a]) => a), held.map(([, h]) => h.fence)]))
            .rows as Row[]
        ).map((r) => r.account as string),
      );
      for (const [account, h] of held) {
        // Another process took it (this one was frozen past its lease): the fence moved on.
        if (!kept.has(account)) this.held.delete(account);
        else if (this.held.get(account) === h) h.validUntil = sentAt + validFor(lease.leaseMs);
      }
      if (this.held.size === 0) this.stopTimer();
    } catch {
      this.dropAll();
    }
  }

  private async connection(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = this.deps.connect();
    // A connection that dies takes this process's claim to every lease with it (others see its backend gone).
    const lost = () => {
      if (this.client === client) this.dropAll();
    };
    client.on("error", lost);
    client.on("end", lost);
    this.client = client;
    try {
      await client.connect();
    } catch (err) {
      lost();
      throw err;
    }
    return client;
  }

  /** Forgets every lease (the connection failed or is gone) and ends the connection; the next check starts afresh. */
  private dropAll(): void {
    this.held.clear();
    this.stopTimer();
    const old = this.client;
    this.client = null;
    old?.end().catch(() => {});
  }

  private startTimer(): void {
    if (this.timer || !this.lease) return;
    this.timer = setInterval(() => void this.renew(), Math.max(50, Math.floor(this.lease.leaseMs / 3)));
    this.timer.unref();
  }

  private stopTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

/** How long a renewal lets this process act as leader: the lease less a margin for the round trip's start. */
function validFor(leaseMs: number): number {
  return leaseMs - Math.min(1_000, Math.floor(leaseMs / 10));
}

import pg from "pg";
import { type PgAddress, type PgHost, showHost } from "./hosts.js";

/**
 * Which of DATABASE_URL's hosts takes writes, kept up to date (docs/operations.md, "PostgreSQL
 * failover"). libpq's `target_session_attrs=read-write` walks the list at each connection;
 * node-postgres does not, so this does it once for the whole store and every new connection goes
 * to the host found:
 * - each host is probed on a connection of its own: a standby (pg_is_in_recovery), a read-only
 *   session, or no answer is not writable;
 * - of several writable hosts (a standby promoted while the old primary still runs: split brain)
 *   the one on the newest timeline wins, and every instance picks the same: the promoted standby,
 *   never the old primary, whose writes the new timeline would not hold;
 * - while no host is writable (the primary died, the standby is not promoted yet) new connections
 *   wait for one up to their connect timeout, then fail as a storage outage (503 with
 *   Retry-After), and the hosts are probed every PROBE_FAST_MS;
 * - when the writable host changes, every connection still open to the old one is ended (the pool
 *   replaces them, the LISTEN session and the leadership connection open again), so nothing keeps
 *   writing to a server that is no longer the primary.
 */
export interface HostVerdict {
  host: PgHost;
  /** Writable, with its timeline; or why not. */
  writable: boolean;
  timeline: number;
  why: string;
}

/** Probes while a writable host is known, and while none is. */
const PROBE_EVERY_MS = 1_000;
const PROBE_FAST_MS = 250;
const PROBE_CONNECT_MS = 2_000;

const PROBE = `SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') = 'on' AS read_only,
  CASE WHEN pg_is_in_recovery() THEN 0 ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline`;

/** The host to use: the writable one on the newest timeline, the first listed among equals; null when none is writable. */
export function pickWritable(verdicts: HostVerdict[]): PgHost | null {
  let best: HostVerdict | null = null;
  for (const v of verdicts) if (v.writable && (!best || v.timeline > best.timeline)) best = v;
  return best?.host ?? null;
}

export interface FailoverLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export class PgHosts {
  private current: PgHost | null = null;
  private readonly probes = new Map<PgHost, pg.Client>();
  private readonly open = new Map<pg.Client, PgHost>();
  private waiting: Array<() => void> = [];
  private timer: NodeJS.Timeout | null = null;
  private probing: Promise<HostVerdict[]> | null = null;
  private closed = false;
  /** Since when no host has been writable (performance.now()), and when that was last logged. */
  private lostSince: number | null = null;
  private lastAlarm = 0;
  /** What the last probe of each host found, for messages. */
  last: HostVerdict[] = [];

  constructor(
    readonly address: PgAddress,
    private readonly opts: { failoverTimeoutMs: number; log?: FailoverLog },
  ) {}

  /** The writable host now, if one is known. */
  get writableHost(): PgHost | null {
    return this.current;
  }

  /**
   * At start: probes until a host takes writes, for up to DATABASE_FAILOVER_TIMEOUT while some host
   * does not answer (a failover may be under way), at once when every host answered and none is
   * writable (the list names no primary). Throws one line naming each host's answer.
   */
  async ready(): Promise<void> {
    const deadline = performance.now() + this.opts.failoverTimeoutMs;
    for (;;) {
      const verdicts = await this.probe();
      if (this.current) break;
      const unanswered = verdicts.some((v) => v.why.startsWith("unreachable"));
      if (!unanswered || performance.now() >= deadline) throw this.noWritableHost();
      await new Promise((r) => setTimeout(r, PROBE_FAST_MS));
    }
    this.schedule();
  }

  /** The writable host, waiting up to `timeoutMs` for one (a failover in progress); else a storage-outage error. */
  async writable(timeoutMs: number): Promise<PgHost> {
    if (this.current) return this.current;
    if (this.closed) throw this.noWritableHost();
    this.schedule(0);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, timeoutMs);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.waiting.push(done);
    });
    if (this.current) return this.current;
    throw this.noWritableHost();
  }

  /** A connection opened to `host`: ended should that host stop being the writable one. */
  track(client: pg.Client, host: PgHost): void {
    this.open.set(client, host);
    const forget = () => {
      this.open.delete(client);
      // A connection that dies on its own may be the first sign of a failover: look now.
      if (!this.closed && this.current === host) this.schedule(0);
    };
    client.once("end", forget);
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const client of this.probes.values()) client.end().catch(() => {});
    this.probes.clear();
    for (const done of this.waiting.splice(0)) done();
  }

  private schedule(ms = this.current ? PROBE_EVERY_MS : PROBE_FAST_MS): void {
    if (this.closed) return;
    if (this.timer) {
      if (ms > 0) return;
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.probe().finally(() => this.schedule());
    }, ms);
    this.timer.unref();
  }

  /** One probe of every host, side by side; one at a time. */
  private probe(): Promise<HostVerdict[]> {
    this.probing ??= Promise.all(this.address.hosts.map((h) => this.probeHost(h)))
      .then((verdicts) => {
        this.last = verdicts;
        this.settle(pickWritable(verdicts));
        return verdicts;
      })
      .finally(() => {
        this.probing = null;
      });
    return this.probing;
  }

  private async probeHost(host: PgHost): Promise<HostVerdict> {
    try {
      let client = this.probes.get(host);
      if (!client) {
        client = new pg.Client({
          connectionString: this.address.urlFor(host),
          connectionTimeoutMillis: PROBE_CONNECT_MS,
        });
        client.on("error", () => {});
        const c = client;
        client.once("end", () => {
          if (this.probes.get(host) === c) this.probes.delete(host);
        });
        this.probes.set(host, client);
        await client.connect();
      }
      const r = (await client.query({ text: PROBE, query_timeout: PROBE_CONNECT_MS } as pg.QueryConfig)).rows[0] as {
        standby: boolean;
        read_only: boolean;
        timeline: number;
      };
      if (r.standby) return { host, writable: false, timeline: 0, why: "a standby (in recovery)" };
      if (r.read_only) return { host, writable: false, timeline: 0, why: "read-only (default_transaction_read_only)" };
      return { host, writable: true, timeline: Number(r.timeline), why: `writable, timeline ${r.timeline}` };
    } catch (err) {
      const c = this.probes.get(host);
      this.probes.delete(host);
      c?.end().catch(() => {});
      const e = err as { code?: string; message?: string };
      return { host, writable: false, timeline: 0, why: `unreachable (${e.code ?? e.message ?? String(err)})` };
    }
  }

  private settle(next: PgHost | null): void {
    const previous = this.current;
    this.current = next;
    if (next) {
      if (this.lostSince !== null && this.opts.log)
        this.opts.log.warn(
          { host: showHost(next), after_ms: Math.round(performance.now() - this.lostSince) },
          "PostgreSQL: writable host found again",
        );
      this.lostSince = null;
      for (const done of this.waiting.splice(0)) done();
    } else if (this.lostSince === null) {
      this.lostSince = performance.now();
      this.lastAlarm = this.lostSince;
      this.opts.log?.warn(
        { hosts: this.last.map((v) => `${showHost(v.host)}: ${v.why}`) },
        "PostgreSQL: no writable host; requests answer 503 until one is found",
      );
    } else if (performance.now() - this.lastAlarm >= this.opts.failoverTimeoutMs) {
      this.lastAlarm = performance.now();
      this.opts.log?.error(
        {
          hosts: this.last.map((v) => `${showHost(v.host)}: ${v.why}`),
          for_ms: Math.round(this.lastAlarm - this.lostSince),
        },
        "PostgreSQL: still no writable host after DATABASE_FAILOVER_TIMEOUT; check the failover",
      );
    }
    if (previous && previous !== next) {
      // The old primary (dead, demoted, or left behind by a promotion): nothing more goes to it.
      // The socket destroyed, as a lost connection: a statement in flight fails (never acknowledged),
      // an idle pooled connection leaves the pool on node-postgres's own 'error'.
      for (const [client, host] of this.open)
        if (host === previous)
          (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
      if (next) this.opts.log?.warn({ from: showHost(previous), to: showHost(next) }, "PostgreSQL: failed over");
    }
  }

  /** A storage outage (SQLSTATE 08001: 503 with Retry-After), naming what each host answered. */
  private noWritableHost(): Error {
    const hosts = this.last.map((v) => `${showHost(v.host)} is ${v.why}`).join(", ");
    return Object.assign(
      new Error(
        `no host in DATABASE_URL takes writes (${hosts || "not probed yet"}): list the primary among the hosts, or wait for the failover to finish`,
      ),
      { code: "08001", noWritableHost: true },
    );
  }
}

import { LRUCache } from "lru-cache";
import { Cancel, DeadlineError, DeadlineTimer } from "../net/deadline.js";
import type { SendResult } from "../webhooks/sender.js";
import { BrokerAddressBlocked, type BrokerGuardOptions, brokerResolver } from "./broker-address.js";
import { ConnectionCache } from "./connections.js";
import { confirmed, publishFailed } from "./queue-message.js";

export interface QueueClientOptions extends BrokerGuardOptions {
  /** Deadline to open a connection (default 10 s). */
  connectTimeoutMs?: number;
  /** A connection unused this long is closed (default 60 s). */
  idleMs?: number;
}

/** One publish: which connection, how to open it, how to send on it. */
export interface Publish<C> {
  /** The client and broker (and credentials): whose connection this is. */
  key: string;
  /** Names the broker in errors: `RabbitMQ at host:port`. */
  broker: string;
  timeoutMs: number;
  open: (signal: AbortSignal) => Promise<C>;
  /** Sends and resolves with the broker's confirmation, as the attempt log shows it; `cancel` aborts at the deadline. */
  send: (conn: C, cancel: Cancel) => Promise<string>;
}

/**
 * What every queue client shares: the address guard, the connection cache (per client and
 * broker, connect deadline, idle close) and the publish deadline, whose passing drops the
 * connection so a stalled broker frees the attempt's slot and the next attempt starts afresh.
 * A publish never throws: it answers a SendResult like an HTTP attempt.
 */
export abstract class BrokerClient<C> {
  protected readonly connections: ConnectionCache<C>;
  protected readonly resolve: (hostname: string) => Promise<string>;
  protected readonly connectTimeoutMs: number;
  /** Parsed endpoint URLs and the broker each names: parsed once per URL, not once per publish. */
  private readonly addresses = new LRUCache<string, BrokerAddress>({ max: ADDRESSES_KEPT });
  /** Every publish's deadline, on one timer. */
  private readonly deadlines = new DeadlineTimer();

  constructor(opts: QueueClientOptions, close: (conn: C) => unknown) {
    this.resolve = brokerResolver(opts);
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 10_000;
    this.connections = new ConnectionCache<C>({ close, ...(opts.idleMs !== undefined ? { idleMs: opts.idleMs } : {}) });
  }

  /** Connections open now (reused, closed when idle). */
  get openConnections(): number {
    return this.connections.size;
  }

  close(): Promise<void> {
    return this.connections.closeAll();
  }

  /**
   * An endpoint URL parsed, with `describe`'s name of its broker (`RabbitMQ at host:port`), kept
   * per URL: a publish reads them, and a stream of publishes goes to a handful of URLs. Bounded:
   * the last ADDRESSES_KEPT URLs used. The URL is shared: read it, never change it.
   */
  protected address(raw: string, describe: (url: URL) => string): BrokerAddress {
    let known = this.addresses.get(raw);
    if (known === undefined) {
      const url = new URL(raw);
      known = { url, broker: describe(url) };
      this.addresses.set(raw, known);
    }
    return known;
  }

  protected async publishWith(p: Publish<C>): Promise<SendResult> {
    const startedAt = Date.now();
    const expired = () =>
      new DeadlineError(`publishing to ${p.broker} took longer than its deadline of ${p.timeoutMs} ms`, "total");
    try {
      // The connect has its own deadline, never past the publish's; the send gets what is left.
      // A send that misses it rejects here, so `use` drops the connection (a stalled broker's).
      const answer = await this.connections.use(
        p.key,
        p.broker,
        Math.min(this.connectTimeoutMs, p.timeoutMs),
        p.open,
        (conn) => {
          const cancel = new Cancel();
          return this.deadlines.race(p.timeoutMs - (Date.now() - startedAt), expired, cancel, () =>
            p.send(conn, cancel),
          );
        },
      );
      return confirmed(startedAt, Date.now(), answer);
    } catch (err) {
      return publishFailed(startedAt, Date.now(), err, err instanceof BrokerAddressBlocked);
    }
  }
}

/** A parsed endpoint URL and the broker it names in errors. */
export interface BrokerAddress {
  readonly url: URL;
  readonly broker: string;
}

/** Endpoint URLs a queue client keeps parsed. */
const ADDRESSES_KEPT = 1_000;

/** `host:port` of a broker URL, the scheme's default port filled in. */
export function brokerHostOf(url: URL, defaultPort: string): string {
  return `${url.hostname}:${url.port || defaultPort}`;
}

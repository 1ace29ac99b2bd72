import { StringDecoder } from "node:string_decoder";
import { LRUCache } from "lru-cache";
import { Agent, type Dispatcher } from "undici";
import { parseRetryAfter } from "./schedule.js";
import { createGuardedLookup, validateCallbackUrl, type Resolver } from "../net/address-guard.js";
import { Cancel, DeadlineTimer } from "../net/deadline.js";

export interface SendRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  timeoutMs: number;
  /**
   * Whose request it is (the client id): each tenant has its own connections to an origin, so one
   * client's slow receivers or notices never hold the sockets another client's webhook needs.
   */
  tenant?: string;
}

export interface SendResult {
  ok: boolean;
  statusCode: number | null;
  latencyMs: number;
  /** Human readable, never contains header values. */
  error: string | null;
  /** The SSRF guard refused: nothing was sent. */
  blocked: boolean;
  responseBody: string | null;
  retryAfterMs: number | null;
  /**
   * The receiver ended the event's retries for good: `410 Gone`, or any other non-2xx answer with
   * `webhook-delivery: abort` (docs/contract.md, "Ending retries from the receiver").
   */
  gone: boolean;
}

export const RESPONSE_BODY_LIMIT = 4096;

/** Where a POST goes, as undici's request takes it. */
interface RequestTarget {
  origin: string;
  path: string;
}

/** URLs whose parsed target the sender keeps. */
const TARGETS_KEPT = 1_000;

class AttemptTimeout extends Error {
  constructor(timeoutMs: number) {
    super(`timeout after ${timeoutMs} ms`);
  }
}

/** What the attempt learned before it ended (a timeout may strike after the headers). */
interface Progress {
  statusCode: number | null;
  retryAfter: string | null;
  /** The answer's `webhook-delivery` header, lower-cased and trimmed. */
  delivery: string | null;
  responseBody: string | null;
}

/** A SendResult: a failure with nothing learned, unless `fields` say otherwise. */
export function sendResult(fields: Partial<SendResult>): SendResult {
  return {
    ok: false,
    statusCode: null,
    latencyMs: 0,
    error: null,
    blocked: false,
    responseBody: null,
    retryAfterMs: null,
    gone: false,
    ...fields,
  };
}

export interface SenderOptions {
  allowPrivateNetworks: boolean;
  resolve?: Resolver;
  /** Connections per tenant and origin (default 16). */
  connections?: number;
  now?: () => number;
  /** Tenants' connection pools kept at once; past it, the longest idle ones are closed (default 1,000). */
  maxTenants?: number;
  /** A tenant's pool unused this long is closed when another tenant's is opened (default 60 s). */
  tenantIdleMs?: number;
}

/**
 * One HTTP POST per call, through pooled connections whose DNS lookup is the SSRF guard, one undici
 * Agent per tenant (docs/contract.md, "Connections per tenant"; docs/decisions/0008): connections are per tenant and origin, never
 * one pool per origin for everyone. Redirects are never followed (no redirect interceptor). Never throws.
 */
export class WebhookSender {
  private readonly agents: TenantAgents;
  private readonly allowPrivateNetworks: boolean;
  private readonly now: () => number;
  /** Sends not yet settled; close() waits for them (`idle` is called as the last one settles). */
  private inFlight = 0;
  private idle: (() => void) | null = null;
  private readonly targets = new LRUCache<string, RequestTarget>({ max: TARGETS_KEPT });
  /** Every attempt's deadline, on one timer. */
  private readonly deadlines = new DeadlineTimer();
  private closing: Promise<void> | null = null;

  constructor(opts: SenderOptions) {
    this.allowPrivateNetworks = opts.allowPrivateNetworks;
    this.now = opts.now ?? Date.now;
    const lookup = createGuardedLookup({
      allowPrivateNetworks: opts.allowPrivateNetworks,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
    });
    // Every tenant's Agent connects through the guarded lookup: the SSRF guard is on every connection.
    this.agents = new TenantAgents(() => new Agent({ connections: opts.connections ?? 16, connect: { lookup } }), {
      maxTenants: opts.maxTenants ?? 1_000,
      idleMs: opts.tenantIdleMs ?? 60_000,
    });
  }

  /** Tenants with a connection pool open now. */
  get tenantPools(): number {
    return this.agents.size;
  }

  /** Never rejects: an unexpected error is a failed attempt naming it. */
  async send(req: SendRequest): Promise<SendResult> {
    const started = this.now();
    this.inFlight += 1;
    try {
      return await this.attempt(req, started);
    } catch (err) {
      return sendResult({
        latencyMs: Math.max(0, Math.round(this.now() - started)),
        error: `internal error: ${err instanceof Error ? err.message.slice(0, 200) : "unknown"}`,
      });
    } finally {
      this.inFlight -= 1;
      if (this.inFlight === 0) this.idle?.();
    }
  }

  private async attempt(req: SendRequest, started: number): Promise<SendResult> {
    const result = (fields: Partial<SendResult>): SendResult =>
      sendResult({ latencyMs: Math.max(0, Math.round(this.now() - started)), ...fields });

    if (this.closing) return result({ error: "sender closed" });

    // Re-validated on every send: the URL was stored under an earlier configuration,
    // and literal IPs are only caught here (net.connect skips lookup for them).
    const checked = validateCallbackUrl(req.url, { allowPrivateNetworks: this.allowPrivateNetworks });
    if (!checked.ok) return result({ blocked: true, error: `blocked: ${checked.reason}` });

    const progress: Progress = { statusCode: null, retryAfter: null, delivery: null, responseBody: null };
    // The sender's one deadline timer, not a timer, AbortController and Promise.race per attempt.
    // The race is still needed: undici only aborts a request once it is on a socket, so an attempt
    // still connecting (a stalled lookup, a black-holed SYN) would otherwise outlive its deadline.
    const cancel = new Cancel();
    const tenant = this.agents.take(req.tenant ?? "");
    try {
      await this.deadlines.race(
        req.timeoutMs,
        () => new AttemptTimeout(req.timeoutMs),
        cancel,
        () => exchange(tenant.agent, this.target(checked.url), req, cancel, progress),
      );
    } catch (err) {
      const { message, blocked } = describeError(err, req.timeoutMs);
      return result({
        blocked,
        error: message,
        statusCode: progress.statusCode,
        responseBody: progress.responseBody,
        retryAfterMs: parseRetryAfter(progress.retryAfter, this.now()),
        gone: endedByReceiver(progress.statusCode, progress.delivery),
      });
    } finally {
      this.agents.give(tenant);
    }

    const status = progress.statusCode ?? 0;
    return result({
      ok: status >= 200 && status < 300,
      statusCode: status,
      error: statusError(status, progress.delivery),
      responseBody: progress.responseBody,
      retryAfterMs: parseRetryAfter(progress.retryAfter, this.now()),
      gone: endedByReceiver(status, progress.delivery),
    });
  }

  /**
   * The origin and path of a checked URL: parsed once per URL, not once per attempt (a receiver
   * gets thousands of attempts at one URL). Bounded: the last TARGETS_KEPT URLs used.
   */
  private target(url: string): RequestTarget {
    let target = this.targets.get(url);
    if (target === undefined) {
      const parsed = new URL(url);
      target = { origin: parsed.origin, path: `${parsed.pathname}${parsed.search}` };
      this.targets.set(url, target);
    }
    return target;
  }

  /**
   * Refuses new sends, waits for the ones in flight (each bounded by its own
   * timeout), then tears the pool down. destroy, not close: undici does not
   * cancel a connect attempt when its request is aborted, so after a timeout
   * during connect Agent.close() would wait for undici's own connect timeout.
   * Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.inFlight > 0) await new Promise<void>((resolve) => (this.idle = resolve));
      await this.agents.destroy();
    })();
    return this.closing;
  }
}

interface TenantAgent {
  agent: Agent;
  inFlight: number;
  lastUsed: number;
}

/**
 * One undici Agent (a pool per origin) per tenant. A tenant's Agent is closed once it has been
 * unused for `idleMs` (looked at when another tenant's is opened), or, past `maxTenants`, the
 * longest unused one with nothing in flight: memory stays bounded whatever the number of clients.
 */
class TenantAgents {
  /** In order of last use, least recent first. */
  private readonly agents = new Map<string, TenantAgent>();

  constructor(
    private readonly make: () => Agent,
    private readonly opts: { maxTenants: number; idleMs: number },
  ) {}

  get size(): number {
    return this.agents.size;
  }

  /** The tenant's Agent for one request (opened when it has none): give() it back when the request is over. */
  take(tenant: string): TenantAgent {
    let entry = this.agents.get(tenant);
    if (entry) this.agents.delete(tenant);
    else {
      this.evict();
      entry = { agent: this.make(), inFlight: 0, lastUsed: performance.now() };
    }
    this.agents.set(tenant, entry);
    entry.inFlight += 1;
    return entry;
  }

  give(entry: TenantAgent): void {
    entry.inFlight -= 1;
    entry.lastUsed = performance.now();
  }

  private evict(): void {
    const now = performance.now();
    let over = this.agents.size + 1 - this.opts.maxTenants;
    for (const [tenant, entry] of this.agents) {
      if (entry.inFlight > 0) continue;
      if (over <= 0 && now - entry.lastUsed < this.opts.idleMs) continue;
      this.agents.delete(tenant);
      over -= 1;
      // Nothing in flight: close() only ends idle keep-alive sockets.
      entry.agent.close().catch(() => {});
    }
  }

  async destroy(): Promise<void> {
    const all = [...this.agents.values()];
    this.agents.clear();
    await Promise.all(all.map((e) => e.agent.destroy()));
  }
}

/**
 * One POST on the tenant's Agent, through undici's dispatch with a handler of its own (not
 * `request()`: its response stream, async iterator, header object and abort-signal listeners cost
 * more than the rest of an attempt's send; docs/performance.md, delivery's fourteenth round).
 * Settles once the answer has ended, or once RESPONSE_BODY_LIMIT bytes of it have been read, when
 * the rest is dropped and the socket with it (rather than download whatever the receiver chooses
 * to send); rejects with undici's error, or the cancel's reason once `cancel` aborts. `progress`
 * keeps what was learnt, for an attempt that ends in an error or a timeout.
 */
function exchange(
  agent: Agent,
  url: RequestTarget,
  req: SendRequest,
  cancel: Cancel,
  progress: Progress,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const handler = new AnswerReader(progress, cancel, resolve, reject);
    agent.dispatch(
      {
        origin: url.origin,
        path: url.path,
        method: "POST",
        headers: req.headers,
        body: req.body,
        // Backstops only: the race with the attempt timer is what bounds the attempt.
        headersTimeout: Math.max(1, req.timeoutMs),
        bodyTimeout: Math.max(1, req.timeoutMs),
      },
      handler,
    );
  });
}

/** A raw header name or value as undici hands it (a Buffer on HTTP/1.1), as latin1 like its own parser. */
const rawText = (raw: Buffer | string): string => (typeof raw === "string" ? raw : raw.toString("latin1"));

/** undici's dispatch handler of one attempt (its callbacks: onConnect, onHeaders, onData, onComplete, onError). */
class AnswerReader implements Dispatcher.DispatchHandler {
  private settled = false;
  private abort: ((reason: unknown) => void) | null = null;
  private decoder: StringDecoder | null = null;
  private received = 0;

  constructor(
    private readonly progress: Progress,
    private readonly cancel: Cancel,
    private readonly resolve: () => void,
    private readonly reject: (err: unknown) => void,
  ) {
    // The deadline aborts the request (its socket too) wherever it is: connecting, sending, reading.
    cancel.once("abort", () => {
      this.fail(cancel.reason);
      this.abort?.(cancel.reason);
    });
  }

  onConnect(abort: (reason?: Error) => void): void {
    if (this.cancel.aborted) abort(this.cancel.reason as Error);
    else this.abort = abort as (reason: unknown) => void;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], _resume: () => void): boolean {
    // An informational answer (1xx) is not the answer.
    if (statusCode < 200) return true;
    const { progress } = this;
    progress.statusCode = statusCode;
    // The first of each (a repeated header's first value, as undici's parsed headers give it).
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!;
      if (name.length === 11 && progress.retryAfter === null && rawText(name).toLowerCase() === "retry-after")
        progress.retryAfter = rawText(rawHeaders[i + 1]!);
      else if (name.length === 16 && progress.delivery === null && rawText(name).toLowerCase() === "webhook-delivery")
        progress.delivery =
          rawText(rawHeaders[i + 1]!)
            .trim()
            .toLowerCase() || null;
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled) return false;
    const take = chunk.subarray(0, RESPONSE_BODY_LIMIT - this.received);
    this.decoder ??= new StringDecoder("utf8");
    this.progress.responseBody = (this.progress.responseBody ?? "") + this.decoder.write(take);
    this.received += take.length;
    if (this.received >= RESPONSE_BODY_LIMIT) {
      // Enough read: the rest is dropped, and the socket with it.
      this.settled = true;
      this.resolve();
      this.abort?.(new Error("answer over the read limit: dropped"));
      return false;
    }
    return true;
  }

  onComplete(): void {
    if (this.settled) return;
    this.settled = true;
    this.progress.responseBody ??= "";
    this.resolve();
  }

  onError(err: Error): void {
    this.fail(err);
  }

  private fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }
}

/**
 * The one rule for a receiver ending an event's retries: `410 Gone`, or `webhook-delivery: abort`
 * on any answer that is not a 2xx (a 2xx already delivers the event, so the header changes nothing).
 */
export function endedByReceiver(status: number | null, delivery: string | null): boolean {
  if (status === null || (status >= 200 && status < 300)) return false;
  return status === 410 || delivery === "abort";
}

function statusError(status: number, delivery: string | null): string | null {
  if (status >= 200 && status < 300) return null;
  if (status === 410) return "gone (410): the receiver asked for no more deliveries";
  if (endedByReceiver(status, delivery))
    return `aborted (HTTP ${status}, webhook-delivery: abort): the receiver asked for no more deliveries`;
  if (status >= 300 && status < 400) return `redirect (${status}) not followed`;
  return `HTTP ${status}`;
}

const NETWORK_ERRORS: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  EPIPE: "connection reset",
  UND_ERR_SOCKET: "connection closed by the receiver",
  UND_ERR_CONNECT_TIMEOUT: "connect timeout",
  ETIMEDOUT: "connect timeout",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "dns lookup failed (temporary)",
  UND_ERR_CLOSED: "sender closed",
  UND_ERR_DESTROYED: "sender closed",
};

function errorChain(err: unknown): Array<Error & { code?: unknown }> {
  const chain: Array<Error & { code?: unknown }> = [];
  const queue: unknown[] = [err];
  while (queue.length > 0 && chain.length < 10) {
    const next = queue.shift();
    if (!(next instanceof Error)) continue;
    chain.push(next);
    if (next.cause !== undefined) queue.push(next.cause);
    // autoSelectFamily reports one error per address it tried.
    if (next instanceof AggregateError) queue.push(...next.errors);
  }
  return chain;
}

function describeError(err: unknown, timeoutMs: number): { message: string; blocked: boolean } {
  const chain = errorChain(err);
  const blocked = chain.find((e) => e.code === "EBLOCKED");
  if (blocked) return { message: `blocked: ${blocked.message}`, blocked: true };
  if (
    chain.some(
      (e) => e instanceof AttemptTimeout || e.code === "UND_ERR_HEADERS_TIMEOUT" || e.code === "UND_ERR_BODY_TIMEOUT",
    )
  ) {
    return { message: `timeout after ${timeoutMs} ms`, blocked: false };
  }
  for (const e of chain) {
    const code = typeof e.code === "string" ? e.code : "";
    const known = NETWORK_ERRORS[code];
    if (known) return { message: known, blocked: false };
    if (/^(ERR_SSL_|ERR_TLS_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_)/.test(code)) {
      return { message: `tls error: ${code}`, blocked: false };
    }
  }
  const first = chain[0];
  return { message: first ? first.message.slice(0, 200) || first.name : "unknown error", blocked: false };
}

import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import { DeliveryLifecycle } from "../core/delivery.js";
import type { ClientRow, EventRow, Store } from "../store/store.js";
import { breakerOutcome, CircuitBreakers, type BreakerOptions, type BreakerTransition, type Permit } from "../webhooks/circuit-breaker.js";
import { destinationHost } from "../webhooks/destination.js";
import { sendResult, type SendResult, type WebhookSender } from "../webhooks/sender.js";
import { outgoingHeaders } from "../webhooks/outgoing.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";

export interface DispatcherOptions {
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  sender: WebhookSender;
  owner: LeaseOwner;
  /** Deliveries in flight at once, across all receivers. */
  maxInFlight?: number;
  /** Deliveries in flight at once per delivery key (one client's events to one host, `hostname:port`); the relay passes WEBHOOK_MAX_IN_FLIGHT_PER_HOST (default 8). */
  maxPerHost?: number;
  /** The per-key circuit breaker's thresholds (defaults: 5 failures, 30 s doubling to 10 min). */
  breaker?: BreakerOptions;
  random?: () => number;
  onAttempt?: (event: EventRow, result: SendResult) => void;
}

/** Largest body the dispatcher sends (bodies carry output URLs, never media): a defensive bound. */
export const MAX_PAYLOAD_BYTES = 256 * 1024;

/** What one claim started, and whether it took as many events as it had room for. */
interface Claimed {
  started: Promise<void>[];
  full: boolean;
}

/**
 * Delivers outbox events: claims due ones under a lease, signs and POSTs each, records the attempt,
 * and schedules the next one on WEBHOOK_RETRY_SCHEDULE. Deliveries run concurrently and the loop does
 * not wait for a slow receiver before claiming more.
 *
 * Receiver protection and tenant isolation. The unit is the delivery key: one client's events to
 * one destination host. At most `maxPerHost` attempts are in flight per key, and a key whose
 * circuit breaker is open gets no attempts: when it opens, the key's pending events are moved to
 * the end of the cool-down (one indexed update), and the half-open trial is drawn from that key's
 * own events. So a client whose receiver fails or hangs (or who points callbacks at someone
 * else's host) only ever delays itself, and the claim query never carries a list of refused
 * hosts: only keys at their cap or with a trial out are left out, and each of those holds an
 * attempt in flight, so the list is bounded by the in-flight cap. The counts live in this
 * process's memory; a store shared by several instances also caps each key across all of them
 * (EventClaimOptions.maxPerKey, counted from the leased events).
 *
 * Claims never overlap (one at a time, see claimAndStart): the per-key room a claim is sized by
 * cannot be spent by another claim across the claim's await, and every start checks it again.
 */
export class Dispatcher {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly maxInFlight: number;
  private readonly maxPerHost: number;
  private readonly keyInFlight = new Map<string, number>();
  readonly breakers: CircuitBreakers;
  /** Called when a delivery finishes, so the loop can claim more (set by main). */
  onSettled: () => void = () => {};

  private claiming: Promise<Claimed> | null = null;
  private readonly events: DeliveryLifecycle;

  constructor(private readonly opts: DispatcherOptions) {
    this.events = new DeliveryLifecycle({ store: opts.store, clock: opts.clock, retryScheduleMs: opts.config.webhookRetryScheduleMs, ...(opts.random ? { random: opts.random } : {}) });
    this.maxInFlight = opts.maxInFlight ?? 64;
    this.maxPerHost = Math.max(1, opts.maxPerHost ?? 8);
    this.breakers = new CircuitBreakers(opts.clock, opts.breaker);
  }

  get activeCount(): number {
    return this.inFlight.size;
  }

  /** Claims what is due and starts delivering it; does not wait for the deliveries (production loop). */
  async tick(): Promise<TickResult> {
    const { started, full } = await this.claimAndStart();
    // A claim that filled its room loops again at once (more may be due). One that took less than
    // it could has taken everything claimable: a tick at once would only walk the due index past
    // the saturated hosts' backlog to find nothing, so the next due time decides (settling
    // attempts and new events nudge the loop anyway).
    return { didWork: started.length > 0, nextDueAt: full ? this.opts.clock.now() : await this.nextDueAt() };
  }

  /** Claims what is due, delivers it and waits for every attempt to be recorded (tests). */
  async runOnce(): Promise<number> {
    const { started } = await this.claimAndStart();
    await Promise.all(started);
    return started.length;
  }

  /** Waits for in-flight deliveries (graceful shutdown). */
  async drain(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }

  /** Attempts in flight for one delivery key (`clientId|host`) now. */
  inFlightTo(key: string): number {
    return this.keyInFlight.get(key) ?? 0;
  }

  private async nextDueAt(): Promise<number | null> {
    if (this.inFlight.size >= this.maxInFlight) return null;
    // Saturated keys wake the loop when an attempt settles (onSettled); open circuits postponed their
    // events to the trial time, so the due index alone says when to wake.
    return this.opts.store.events.nextDueAt({ now: this.opts.clock.now(), excludeKeys: this.busyKeys() });
  }

  /** How many more attempts may start for this key now: the rest of its cap, or the breaker's allowance. */
  private keyRoom(key: string): number {
    return Math.min(this.maxPerHost - this.inFlightTo(key), this.breakers.allowance(key));
  }

  /**
   * Keys none of whose events may be claimed now: at their cap, or with their breaker's trial out.
   * Every such key has an attempt in flight, so this is never longer than maxInFlight.
   */
  private busyKeys(): string[] {
    const busy: string[] = [];
    for (const key of this.keyInFlight.keys()) if (this.keyRoom(key) <= 0) busy.push(key);
    return busy;
  }

  /** One claim at a time: a second caller waits for the running claim and claims after it. */
  private async claimAndStart(): Promise<Claimed> {
    while (this.claiming) await this.claiming.catch(() => null);
    this.claiming = this.claimOnce();
    try {
      return await this.claiming;
    } finally {
      this.claiming = null;
    }
  }

  private async claimOnce(): Promise<Claimed> {
    const { store, clock, config, owner, logger } = this.opts;
    const room = this.maxInFlight - this.inFlight.size;
    if (room <= 0) return { started: [], full: false };
    const now = clock.now();
    const claimed = await store.events.claimDue({
      now,
      leaseMs: config.webhookTimeoutMs + 5_000,
      token: owner.token(),
      limit: room,
      excludeKeys: this.busyKeys(),
      keyRoom: (key) => this.keyRoom(key),
      maxPerKey: this.maxPerHost,
    });
    const clients = new Map<string, ClientRow | undefined>();
    for (const id of new Set(claimed.map((e) => e.clientId))) clients.set(id, await store.clients.find(id));
    const started: Promise<void>[] = [];
    for (const event of claimed) {
      const work = this.start(event, clients.get(event.clientId));
      if (!work) continue;
      const promise = work.catch((err: unknown) => {
        logger.error({ err, event_id: event.id }, "delivery bookkeeping failed");
      });
      this.inFlight.add(promise);
      void promise.finally(() => {
        this.inFlight.delete(promise);
        this.onSettled();
      });
      started.push(promise);
    }
    return { started, full: claimed.length >= room };
  }

  /**
   * Starts one claimed event: an attempt under the host's cap and breaker, or an immediate failure
   * that needs no attempt on the wire. Null when the host has no room after all (a URL stored in a
   * spelling the claim's SQL filter did not recognise): the lease is handed back untouched.
   */
  private start(event: EventRow, client: ClientRow | undefined): Promise<void> | null {
    if (!client || !event.callbackUrl) return this.events.fail(event, "no callback_url");
    const size = Buffer.byteLength(event.payload, "utf8");
    if (size > MAX_PAYLOAD_BYTES) return this.refuseOversized(event, size);

    const key = `${event.clientId}|${event.destinationHost}`;
    const permit = this.keyRoom(key) > 0 ? this.breakers.acquire(key) : null;
    if (!permit) {
      // An event due while its key's circuit is open (written after it opened): it waits for the
      // trial like the others. At the cap, or with the trial out: handed back untouched.
      this.events.release(event, this.breakers.openUntil(key)).catch((err: unknown) => {
        this.opts.logger.error({ err, event_id: event.id }, "releasing an event lease failed; it expires on its own");
      });
      return null;
    }
    return this.withSlot(key, () => this.deliver(event, client, permit));
  }

  /** Counts an attempt against its key's cap while `work` runs. */
  private withSlot<T>(key: string, work: () => Promise<T>): Promise<T> {
    this.keyInFlight.set(key, this.inFlightTo(key) + 1);
    return work().finally(() => {
      const left = this.inFlightTo(key) - 1;
      if (left > 0) this.keyInFlight.set(key, left);
      else this.keyInFlight.delete(key);
    });
  }

  /**
   * A test ping (POST /webhooks/test) through the same guard, signer, per-key cap and breaker as
   * real deliveries: it cannot crowd a receiver past the cap, nor reach a key whose circuit is open.
   * Returns null when the key has no room now (the caller answers 429).
   */
  async ping(clientId: string, url: string, headers: Record<string, string>, body: string): Promise<SendResult | null> {
    const key = `${clientId}|${destinationHost(url)}`;
    const permit = this.keyRoom(key) > 0 ? this.breakers.acquire(key) : null;
    if (!permit) return null;
    return this.withSlot(key, async () => {
      const result = await this.opts.sender.send({ url, headers, body, timeoutMs: this.opts.config.webhookTimeoutMs });
      const transition = this.breakers.record(permit, breakerOutcome(result));
      if (transition) await this.onTransition(transition);
      return result;
    });
  }

  /** Records a failed attempt without sending: the body is over MAX_PAYLOAD_BYTES and would be every time. */
  private async refuseOversized(event: EventRow, size: number): Promise<void> {
    const result = sendResult({ error: `payload too large: ${size} bytes, the limit is ${MAX_PAYLOAD_BYTES}; not sent` });
    await this.record(event, this.opts.clock.now(), result, true);
  }

  private async deliver(event: EventRow, client: ClientRow, permit: Permit): Promise<void> {
    const { clock, config, sender } = this.opts;
    const startedAt = clock.now();
    let result: SendResult;
    try {
      result = await sender.send({
        url: event.callbackUrl!,
        headers: outgoingHeaders({ client, id: event.id, at: startedAt, body: event.payload, encryptionKey: config.encryptionKey }),
        body: event.payload,
        timeoutMs: config.webhookTimeoutMs,
      });
    } catch (err) {
      // send() never throws; if signing did, the permit must still go back (a lost trial would keep the circuit shut).
      this.breakers.record(permit, "neutral");
      throw err;
    }
    const transition = this.breakers.record(permit, breakerOutcome(result));
    await this.record(event, startedAt, result);
    if (transition) await this.onTransition(transition);
  }

  /** Writes the attempt and the event's new state together (DeliveryLifecycle.recordAttempt); one log line per attempt. */
  private async record(event: EventRow, startedAt: number, result: SendResult, refused = false): Promise<void> {
    const { logger } = this.opts;
    const attempts = event.attempts + 1;
    // Group-committed by the store: attempts settling together share one transaction and one fsync.
    const { outcome } = refused ? await this.events.refuse(event, result) : await this.events.recordAttempt(event, startedAt, result);
    this.opts.onAttempt?.(event, result);
    logger.info(
      {
        event_id: event.id,
        task_id: event.taskId,
        client_id: event.clientId,
        type: event.type,
        attempt: attempts,
        status_code: result.statusCode,
        latency_ms: Math.round(result.latencyMs),
        outcome,
        error: result.error ?? undefined,
      },
      "webhook attempt",
    );
  }

  /**
   * The circuit opened: the host's due events move to the end of the cool-down (no attempt, no
   * retry step spent), and that is said once per opening, not once per postponed event.
   */
  private async onTransition(t: BreakerTransition): Promise<void> {
    const { store, clock, logger } = this.opts;
    const [clientId, host] = splitKey(t.host);
    if (t.kind === "closed") {
      logger.info({ client_id: clientId, host }, "circuit closed: deliveries to host resumed");
      return;
    }
    const postponed = await store.events.postponeKey(clientId, host, t.until, clock.now());
    logger.warn(
      {
        client_id: clientId,
        host,
        consecutive_failures: t.failures,
        after_trial: t.afterTrial,
        cool_down_ms: t.coolDownMs,
        retry_at: new Date(t.until).toISOString(),
        postponed,
      },
      "circuit open: deliveries to host paused",
    );
  }
}

/** A delivery key's client id and host (`clientId|hostname:port`; client ids never contain `|`). */
export function splitKey(key: string): [string, string] {
  const bar = key.indexOf("|");
  return [key.slice(0, bar), key.slice(bar + 1)];
}

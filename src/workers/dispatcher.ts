import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import { WEBHOOK_BODY_MAX_BYTES } from "../core/body-limit.js";
import { DeliveryLifecycle } from "../core/delivery.js";
import type { ClientRow, EventRow, Store } from "../store/store.js";
import { deliveryKey, splitDeliveryKey } from "../store/delivery-key.js";
import type { EndpointHealth } from "../core/endpoint-health.js";
import {
  breakerOutcome,
  CircuitBreakers,
  type BreakerOptions,
  type BreakerTransition,
  type Permit,
} from "../webhooks/circuit-breaker.js";
import { destinationHost } from "../webhooks/destination.js";
import { sendResult, type SendResult, type WebhookSender } from "../webhooks/sender.js";
import { Destinations } from "../destinations/index.js";
import { httpDestination, WEBHOOK_KIND } from "../destinations/http.js";
import { deliveryMessage } from "./delivery/message.js";
import type { LeaseOwner } from "./owner.js";
import { PooledWorker } from "./pooled-loop.js";

export interface DispatcherOptions {
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  /** The HTTP transport of test pings, and of the `webhook` kind when `destinations` is not given. */
  sender: Pick<WebhookSender, "send">;
  /** Where attempts go, by the endpoint's kind (default: only `webhook`, through `sender`). */
  destinations?: Destinations;
  owner: LeaseOwner;
  /** Deliveries in flight at once, across all receivers. */
  maxInFlight?: number;
  /** Deliveries in flight at once per delivery key (one client's events to one host, `hostname:port`); the relay passes WEBHOOK_MAX_IN_FLIGHT_PER_HOST (default 8). */
  maxPerHost?: number;
  /** The per-key circuit breaker's thresholds (defaults: 5 failures, 30 s doubling to 10 min). */
  breaker?: BreakerOptions;
  /** Follows each key's health for failure notices (endpoint.failing / recovered, delivery.exhausted); none in some tests. */
  health?: EndpointHealth;
  random?: () => number;
  onAttempt?: (event: EventRow, result: SendResult) => void;
}

/**
 * Largest body the dispatcher sends: the bound every event body is fitted to when it is written
 * (core/body-limit.ts), checked again here for rows written before that rule.
 */
export const MAX_PAYLOAD_BYTES = WEBHOOK_BODY_MAX_BYTES;

/** How soon after a refill the loop claims for everyone else (a new client's events wait at most this long for it). */
const SWEEP_AFTER_REFILL_MS = 200;

/**
 * A key a claim found at its cap across instances (see Dispatcher.markSaturated) is left out of the
 * loop's claims for this long at first, doubling each time it is found so again, up to the max.
 */
export const SATURATED_BACKOFF_MS = 100;
export const SATURATED_BACKOFF_MAX_MS = 1_000;

/**
 * One claimed event to start: a delivery, or a paused key's trial (its breaker permit already
 * taken). `client` is the event's client as the claim found it.
 */
interface Claim {
  event: EventRow;
  client: ClientRow | undefined;
  trial?: Permit;
}

/**
 * Delivers outbox events: claims due ones under a lease, signs and POSTs each, records the attempt,
 * and schedules the next one on WEBHOOK_RETRY_SCHEDULE. Deliveries run concurrently and the loop does
 * not wait for a slow receiver before claiming more.
 *
 * Receiver protection and tenant isolation (docs/decisions/0006, 0008). The pool of `maxInFlight`
 * attempts is a FairPool (core/fair-pool.ts): shared fairly among clients (claims leave out clients
 * at their share and take the others' events in turns, and a reserve serves any client below its
 * share), so one client's slow receivers never hold everyone's slots. The unit of the cap and the
 * breaker is the delivery key: one client's events to one destination host. At most `maxPerHost`
 * attempts are in flight per key (the pool's per-key cap), and a key whose
 * circuit breaker is open gets no attempts: when it opens, the key's pending events are moved to
 * the end of the cool-down (one indexed update), and the half-open trial is drawn from that key's
 * own events. So a client whose receiver fails or hangs (or who points callbacks at someone
 * else's host) only ever delays itself, and the claim query never carries a list of refused
 * hosts: only keys at their cap or with a trial out are left out, and each of those holds an
 * attempt in flight, so the list is bounded by the in-flight cap. The pool's counts live in this
 * process's memory; a store shared by several instances also caps each key across all of them
 * (EventClaimOptions.maxPerKey, counted from the leased events); a key a claim finds at that shared
 * cap is left out of the loop's claims for a short back-off (noteSaturated), not claimed again at
 * every turn of the loop.
 *
 * Claims never overlap (one at a time, workers/pooled-loop.ts): the per-key room a claim is sized by
 * cannot be spent by another claim across the claim's await, and every start checks it again.
 */
export class Dispatcher extends PooledWorker<Claim> {
  private readonly maxPerHost: number;
  readonly breakers: CircuitBreakers;
  /**
   * Keys found at their cap across instances (other instances hold the rest of maxPerKey, which this
   * pool cannot see): left out of the loop's claims and its next-due probe until `until`, so the
   * loop does not claim them again and again to find nothing. `backoffMs` doubles while the key
   * stays so; a claim that takes any of its events forgets it.
   */
  private readonly saturated = new Map<string, { until: number; backoffMs: number }>();
  /** The whole retry schedule's time: how long an event may wait for a paused host without spending retries on trials. */
  private readonly scheduleSpanMs: number;
  private readonly events: DeliveryLifecycle;
  private readonly destinations: Destinations;

  constructor(private readonly opts: DispatcherOptions) {
    // The pool's slots: each client's share, the reserve, the per-key cap, slots held for a key's refill (see withSlot).
    const maxPerHost = Math.max(1, opts.maxPerHost ?? 8);
    super({ size: Math.max(1, opts.maxInFlight ?? 64), maxPerKey: maxPerHost });
    this.maxPerHost = maxPerHost;
    this.destinations =
      opts.destinations ??
      new Destinations().register(
        WEBHOOK_KIND,
        httpDestination(opts.sender, { allowPrivateNetworks: opts.config.webhookAllowPrivateNetworks }),
      );
    this.events = new DeliveryLifecycle({
      store: opts.store,
      clock: opts.clock,
      retryScheduleMs: opts.config.webhookRetryScheduleMs,
      ...(opts.random ? { random: opts.random } : {}),
    });
    this.scheduleSpanMs = opts.config.webhookRetryScheduleMs.reduce((sum, ms) => sum + ms, 0);
    // The first pause lasts until the schedule's first retry is due at the latest (its delay plus
    // the 20% jitter; 1 s to 30 s): a receiver that fails first attempts but takes retries gets its
    // trial, an attempted event, when that retry was due anyway, and no retry is left behind it.
    const firstRetryMs = Math.min(
      30_000,
      Math.max(1_000, Math.ceil((opts.config.webhookRetryScheduleMs[1] ?? 30_000) * 1.2)),
    );
    this.breakers = new CircuitBreakers(opts.clock, { coolDownMs: firstRetryMs, ...opts.breaker });
  }

  /** Attempts in flight for one delivery key (`clientId|host`) now. */
  inFlightTo(key: string): number {
    return this.slots.inFlightTo(key);
  }

  /** Attempts in flight for one client now. */
  inFlightOf(clientId: string): number {
    return this.slots.inFlightOf(clientId);
  }

  /**
   * A claim that filled its room loops again at once (more may be due). One that took less than
   * it could has taken everything claimable: a tick at once would only walk the due index past
   * the saturated hosts' backlog to find nothing, so the next due time decides (settling
   * attempts and new events nudge the loop anyway).
   */
  async nextDueAt(full: boolean): Promise<number | null> {
    if (full) return this.opts.clock.now();
    if (this.slots.free <= 0) return null;
    // Saturated keys and clients wake the loop when an attempt settles (onSettled); open circuits
    // postponed their events to the trial time, so the due index and the next trial say when to wake.
    // Keys saturated by other instances wake the loop when their back-off ends.
    const now = this.opts.clock.now();
    const due = await this.opts.store.events.nextDueAt({
      now,
      excludeKeys: this.excludedKeys(now),
      excludeClients: this.busyClients(),
    });
    const trialDue = this.breakers
      .dueTrials()
      .some((key) => this.slots.room(splitDeliveryKey(key)[0]) > 0 && this.keyRoom(key) > 0);
    let next = trialDue ? now : this.breakers.nextTrialAt();
    if (due !== null) next = next === null ? due : Math.min(next, due);
    for (const { until } of this.saturated.values()) next = next === null ? until : Math.min(next, until);
    return next;
  }

  /** Whether the event's key is noted as held at its cap by other instances now (noteSaturated). */
  private saturatedElsewhere(event: EventRow): boolean {
    const note = this.saturated.get(deliveryKey(event.clientId, event.destinationHost));
    return note !== undefined && note.until > this.opts.clock.now();
  }

  /** Keys the loop's claim and next-due probe leave out: busy here (busyKeys), or saturated by other instances until their back-off ends. */
  private excludedKeys(now: number): string[] {
    const keys = this.busyKeys();
    for (const [key, { until }] of this.saturated) if (until > now && this.keyRoom(key) > 0) keys.push(key);
    return keys;
  }

  /**
   * After a claim of the due index: a key that had due events in the claim's window and room in
   * this pool, whose client had room too, yet got none while the claim took less than it could,
   * was refused by the store's count across instances (EventClaimOptions.maxPerKey: the other
   * instances hold the rest of the cap), or its lock was held by another instance's claim of it.
   * This pool cannot see those leases, so without a note the loop's next-due probe would find the
   * key's backlog due now and claim it again every turn to find nothing (a statement or two per
   * turn, every 25 ms, per instance). The note leaves the key out for a back-off (100 ms doubling to
   * 1 s while it stays so); meanwhile this instance's own attempts of the key still refill it as
   * they settle (refill counts the shared leases itself), so the key loses no throughput: it is at
   * its cap across instances. A key that got some events, or had none in the window, is forgotten.
   */
  private noteSaturated(asked: ReadonlySet<string>, claimed: readonly EventRow[], full: boolean, now: number): void {
    const got = new Set<string>();
    for (const e of claimed) got.add(deliveryKey(e.clientId, e.destinationHost));
    for (const key of [...this.saturated.keys()])
      if (got.has(key) || (!asked.has(key) && (this.saturated.get(key)?.until ?? 0) <= now)) this.saturated.delete(key);
    if (full) return;
    for (const key of asked) {
      if (got.has(key) || this.keyRoom(key) <= 0 || this.slots.room(splitDeliveryKey(key)[0]) <= 0) continue;
      const before = this.saturated.get(key);
      const backoffMs = before ? Math.min(SATURATED_BACKOFF_MAX_MS, before.backoffMs * 2) : SATURATED_BACKOFF_MS;
      this.saturated.set(key, { until: now + backoffMs, backoffMs });
    }
  }

  /** Clients that may start nothing now (their share: docs/contract.md, "Fair share" and "One fair pool"): none of their events are claimed (each has attempts in flight, so the list is bounded). */
  private busyClients(): string[] {
    return this.slots.busyClients();
  }

  /** How many more attempts may start for this key now: the rest of its cap (less slots held for its refill), or the breaker's allowance. */
  private keyRoom(key: string): number {
    return Math.min(this.slots.keyRoom(key), this.breakers.allowance(key));
  }

  /**
   * Keys none of whose events may be claimed now: at their cap, or with their breaker's trial out.
   * Every such key has an attempt in flight, so this is never longer than maxInFlight.
   */
  private busyKeys(): string[] {
    const busy: string[] = [];
    for (const key of this.slots.keys()) if (this.keyRoom(key) <= 0) busy.push(key);
    return busy;
  }

  /** Paused keys' due trials first, then the due index within each key's and client's room. */
  async claim(start: (claim: Claim) => void): Promise<{ full: boolean }> {
    const { store, clock, config, owner } = this.opts;
    let room = this.slots.free;
    if (room <= 0) return { full: false };
    const clients = new Map<string, ClientRow | undefined>();
    const clientOf = async (id: string) => {
      if (!clients.has(id)) clients.set(id, await store.clients.find(id));
      return clients.get(id);
    };
    const leaseMs = config.webhookTimeoutMs + 5_000;

    // Paused keys whose cool-down is over get their trial first, each drawn from the key's own events.
    for (const key of this.breakers.dueTrials()) {
      if (room <= 0) break;
      const trial = await this.claimTrial(key, leaseMs, clientOf);
      if (!trial) continue;
      start(trial);
      room -= 1;
    }
    if (room <= 0) return { full: true };

    const now = clock.now();
    // Keys the store was asked about with room here: those among them that got nothing may be at their cap across instances.
    const asked = new Set<string>();
    const claimed = await store.events.claimDue({
      now,
      leaseMs,
      token: owner.token(),
      limit: room,
      excludeKeys: this.excludedKeys(now),
      keyRoom: (key) => {
        const n = this.keyRoom(key);
        if (n > 0) asked.add(key);
        return n;
      },
      maxPerKey: this.maxPerHost,
      excludeClients: this.busyClients(),
      clientRoom: (clientId, picked) => this.slots.room(clientId, picked),
    });
    for (const event of claimed) start({ event, client: await clientOf(event.clientId) });
    const full = claimed.length >= room;
    this.noteSaturated(asked, claimed, full, now);
    return { full };
  }

  failed(claim: Claim, err: unknown): void {
    this.opts.logger.error({ err, event_id: claim.event.id }, "delivery bookkeeping failed");
  }

  /**
   * A delivery settled: the slot it frees goes first to the same key's next due events (one
   * indexed claim of that key, within its cap and its client's share), and the loop is woken for
   * everything else: a steady stream to one receiver costs no scan of the whole due index per webhook.
   * A refilled slot leaves the pool as full as it was: the loop's claim of everything else (other
   * clients' due events, which may need the reserve) runs soon, not once per webhook.
   */
  async refill({ event }: Claim): Promise<boolean> {
    try {
      const refill = await this.loop.claimAndStart((start) =>
        this.claimOfKey(event.clientId, event.destinationHost, start),
      );
      // A key other instances hold at its cap (noteSaturated) is left out of the loop's claim
      // anyway: the loop needs to run soon for everyone else, not at once for each such settle.
      if (!(refill.started.length > 0 || refill.full || this.saturatedElsewhere(event))) return false;
      this.sweepSoon();
      return true;
    } catch (err) {
      this.opts.logger.error(
        { err, client_id: event.clientId, host: event.destinationHost },
        "claiming a key's next events failed; the loop claims them",
      );
      return false;
    }
  }

  private sweepTimer: NodeJS.Timeout | null = null;

  /** Wakes the loop within SWEEP_AFTER_REFILL_MS, once for any number of refills meanwhile. */
  private sweepSoon(): void {
    if (this.sweepTimer) return;
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = null;
      this.loop.onSettled();
    }, SWEEP_AFTER_REFILL_MS);
    this.sweepTimer.unref();
  }

  /** The next due events of one key, for the slot its settled attempt freed and held (see refill, withSlot). */
  private async claimOfKey(clientId: string, host: string, start: (claim: Claim) => void): Promise<{ full: boolean }> {
    const { store, clock, config, owner } = this.opts;
    const key = deliveryKey(clientId, host);
    const held = this.slots.heldFor(key);
    let released = false;
    const release = () => {
      if (!released) this.slots.releaseHold(key, held);
      released = true;
    };
    try {
      // Another settle's refill already used the slot (it claimed for every slot held then): the key is full again.
      if (this.keyRoom(key) + held <= 0) return { full: true };
      const room = Math.min(this.keyRoom(key) + held, this.slots.room(clientId), this.slots.free);
      if (room <= 0) return { full: false };
      const claimed = await store.events.claimOfKey(
        { clientId, host },
        {
          now: clock.now(),
          leaseMs: config.webhookTimeoutMs + 5_000,
          token: owner.token(),
          limit: room,
          maxPerKey: this.maxPerHost,
        },
      );
      const client = claimed.length > 0 ? await store.clients.find(clientId) : undefined;
      release();
      for (const event of claimed) start({ event, client });
      return { full: claimed.length >= room };
    } finally {
      release();
    }
  }

  /**
   * The trial of a paused key: one of its events, an attempted one first. With none due, the trial
   * waits: a key with nothing pending is forgotten, one whose events are due later is looked at
   * again a cool-down later, so a paused key with nothing to send costs no query per tick. Any
   * failure hands the permit back, so a database error never leaves the key refused for good.
   */
  private async claimTrial(
    key: string,
    leaseMs: number,
    clientOf: (id: string) => Promise<ClientRow | undefined>,
  ): Promise<Claim | null> {
    const { store, clock, owner } = this.opts;
    const [clientId, host] = splitDeliveryKey(key);
    if (this.slots.room(clientId) <= 0 || this.keyRoom(key) <= 0) return null;
    const permit = this.breakers.acquire(key);
    if (!permit) return null;
    let event: EventRow | undefined;
    let client: ClientRow | undefined;
    try {
      event = await store.events.claimTrial({ clientId, host }, { now: clock.now(), leaseMs, token: owner.token() });
      if (!event) {
        this.breakers.record(permit, "neutral");
        const pending = await store.events.pendingOfKey({ clientId, host });
        if (pending === 0) this.breakers.forget(key);
        else this.breakers.deferTrial(key);
        return null;
      }
      client = await clientOf(clientId);
    } catch (err) {
      this.breakers.record(permit, "neutral");
      if (event) await this.events.release(event, null).catch(() => {});
      this.opts.logger.error(
        { err, host, client_id: clientId },
        "claiming a circuit trial failed; it is tried again later",
      );
      return null;
    }
    return { event, client, trial: permit };
  }

  /** Starts one claimed event: a paused key's trial under its permit, or a delivery (start). */
  run({ event, client, trial }: Claim): Promise<void> | null {
    if (!trial) return this.start(event, client);
    if (!client || !event.callbackUrl) {
      this.breakers.record(trial, "neutral");
      return this.events.fail(event, client ? "no callback_url" : "client not found");
    }
    const size = Buffer.byteLength(event.payload, "utf8");
    if (size > MAX_PAYLOAD_BYTES) {
      this.breakers.record(trial, "neutral");
      return this.refuseOversized(event, size);
    }
    return this.withSlot(event, () => this.deliver(event, client, trial), true);
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

    const key = deliveryKey(event.clientId, event.destinationHost);
    const permit = this.keyRoom(key) > 0 ? this.breakers.acquire(key) : null;
    if (!permit) {
      // An event due while its key's circuit is open (written after it opened): it waits for the
      // trial like the others. At the cap, or with the trial out: handed back untouched.
      this.events.release(event, this.breakers.openUntil(key)).catch((err: unknown) => {
        this.opts.logger.error({ err, event_id: event.id }, "releasing an event lease failed; it expires on its own");
      });
      return null;
    }
    return this.withSlot(event, () => this.deliver(event, client, permit), true);
  }

  /**
   * Holds a slot of the pool (its key's cap, its client's share) while `work` runs; `slot` when the
   * caller already took one. A tracked delivery's slot stays held for its key until the refill (see
   * track) has used it or given it up, so no other claim, nor the loop's next-due probe, sees the
   * key's room in between.
   */
  private withSlot<T>(
    at: { clientId: string; destinationHost: string },
    work: () => Promise<T>,
    refills = false,
    slot = this.slots.take(at.clientId, deliveryKey(at.clientId, at.destinationHost)),
  ): Promise<T> {
    return work().finally(() => slot.release({ holdKey: refills && this.loop.accepting }));
  }

  /**
   * A test ping (POST /webhooks/test) through the same guard, signer, per-key cap and breaker as
   * real deliveries: it cannot crowd a receiver past the cap, nor reach a key whose circuit is open.
   * Returns null when the key has no room now, or the client none in the pool (the caller answers 429).
   */
  async ping(clientId: string, url: string, headers: Record<string, string>, body: string): Promise<SendResult | null> {
    const host = destinationHost(url);
    const key = deliveryKey(clientId, host);
    // A ping is the client's own work: within its share of the pool, like its deliveries.
    const slot = this.breakers.allowance(key) > 0 ? this.slots.tryAcquire(clientId, key) : null;
    if (!slot) return null;
    const permit = this.breakers.acquire(key);
    if (!permit) {
      slot.release();
      return null;
    }
    return this.withSlot(
      { clientId, destinationHost: host },
      async () => {
        const result = await this.opts.sender.send({
          url,
          headers,
          body,
          timeoutMs: this.opts.config.webhookTimeoutMs,
          tenant: clientId,
        });
        const transition = this.breakers.record(permit, breakerOutcome(result));
        if (transition) await this.onTransition(transition);
        return result;
      },
      false,
      slot,
    );
  }

  /**
   * Retry-now (POST /webhooks/hosts/{host}/retry): the key's paused and waiting events are due at
   * once, and an open circuit's cool-down ends, so the next attempt is its trial. Returns how many events were made due.
   */
  async retryHost(clientId: string, host: string): Promise<number> {
    const { store, clock } = this.opts;
    this.breakers.endCoolDown(deliveryKey(clientId, host));
    const n = await store.events.retryKeyNow({ clientId, host }, clock.now());
    this.loop.onSettled();
    return n;
  }

  /** Records a failed attempt without sending: the body is over MAX_PAYLOAD_BYTES and would be every time. */
  private async refuseOversized(event: EventRow, size: number): Promise<void> {
    const result = sendResult({
      error: `payload too large: ${size} bytes, the limit is ${MAX_PAYLOAD_BYTES}; not sent`,
    });
    await this.record(event, this.opts.clock.now(), result, null, true);
  }

  private async deliver(event: EventRow, client: ClientRow, permit: Permit): Promise<void> {
    const { clock, config } = this.opts;
    const startedAt = clock.now();
    let result: SendResult;
    try {
      // Signed here, around the port: every kind carries the same signed message.
      const message = deliveryMessage(event, client, startedAt, config.encryptionKey);
      result = await this.destinations.send(message, { timeoutMs: config.webhookTimeoutMs });
    } catch (err) {
      // send() never throws; if signing did, the permit must still go back (a lost trial would keep the circuit shut).
      this.breakers.record(permit, "neutral");
      throw err;
    }
    const outcome = breakerOutcome(result);
    const transition = this.breakers.record(permit, outcome);
    // A failed trial spends no retry while its event has waited less than its whole schedule; past
    // that, it does, so an event to a host that stays down ends failed (and delivery.exhausted) in time.
    const withinSchedule = clock.now() - event.createdAt < this.scheduleSpanMs;
    const pausedUntil = permit.trial && transition?.kind === "opened" && withinSchedule ? transition.until : null;
    await this.record(event, startedAt, result, pausedUntil);
    if (transition) await this.onTransition(transition);
    // Endpoint health counts any answer but a 2xx as failing (a receiver answering 404 to everything is failing too).
    await this.observe(event, outcome === "neutral" ? "neutral" : result.ok ? "success" : "failure", result.error);
  }

  /** The key's health for failure notices; never fails the delivery it follows. */
  private async observe(
    event: EventRow,
    outcome: ReturnType<typeof breakerOutcome>,
    error: string | null,
  ): Promise<void> {
    try {
      await this.opts.health?.observe({ clientId: event.clientId, host: event.destinationHost }, outcome, error);
    } catch (err) {
      this.opts.logger.error({ err, event_id: event.id }, "endpoint health bookkeeping failed");
    }
  }

  /** Writes the attempt and the event's new state together (DeliveryLifecycle.recordAttempt); one log line per attempt. */
  private async record(
    event: EventRow,
    startedAt: number,
    result: SendResult,
    pausedUntil: number | null = null,
    refused = false,
  ): Promise<void> {
    const { logger } = this.opts;
    const attempts = event.attempts + 1;
    // Group-committed by the store: attempts settling together share one transaction and one fsync.
    const { outcome } = refused
      ? await this.events.refuse(event, result)
      : pausedUntil !== null
        ? await this.events.recordPausedTrial(event, startedAt, result, pausedUntil)
        : await this.events.recordAttempt(event, startedAt, result);
    this.opts.onAttempt?.(event, result);
    if (outcome === "exhausted") {
      await this.opts.health?.exhausted(event, attempts, result.error).catch((err: unknown) => {
        logger.error({ err, event_id: event.id }, "writing the delivery.exhausted notice failed");
      });
    }
    logger.info(
      {
        event_id: event.webhookId ?? event.id,
        destination: event.endpointId ?? "callback",
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
    const [clientId, host] = splitDeliveryKey(t.host);
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

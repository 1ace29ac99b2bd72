import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import { WEBHOOK_BODY_MAX_BYTES } from "../core/body-limit.js";
import { DeliveryLifecycle } from "../core/delivery.js";
import {
  excludedKeys,
  firstCoolDownMs,
  keyRoom,
  noteSaturation,
  wakeAt,
  type SaturationNote,
} from "../core/delivery-plan.js";
import type { KeyHealth } from "../core/key-health.js";
import type { DestinationMessage, Destinations } from "../destinations/index.js";
import { webhookDestinations } from "../destinations/http.js";
import { deliveryKey, splitDeliveryKey } from "../store/delivery-key.js";
import type { Store } from "../store/store.js";
import type { ClientRow, ClaimedEvent } from "../store/rows.js";
import { CircuitBreakers, type BreakerOptions } from "../webhooks/circuit-breaker.js";
import { destinationHost } from "../webhooks/destination.js";
import type { SendResult, WebhookSender } from "../webhooks/sender.js";
import { LeasedAhead } from "./delivery/ahead.js";
import { Attempts } from "./delivery/attempt.js";
import { Refills } from "./delivery/refills.js";
import { type Claim, claimTrial } from "./delivery/trials.js";
import type { LeaseOwner } from "./owner.js";
import { PooledWorker } from "./pooled-loop.js";

/** The dispatcher's port of the Store: the outbox and the clients it signs for. */
export type DispatcherStore = Pick<Store, "events" | "clients">;

export interface DispatcherOptions {
  store: DispatcherStore;
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
  health?: KeyHealth;
  random?: () => number;
  onAttempt?: (event: ClaimedEvent, result: SendResult) => void;
}

/**
 * Largest body the dispatcher sends: the bound every event body is fitted to when it is written
 * (core/body-limit.ts), checked again here for rows written before that rule.
 */
export const MAX_PAYLOAD_BYTES = WEBHOOK_BODY_MAX_BYTES;

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
 * cap is left out of the loop's claims for a short back-off (core/delivery-plan.ts, noteSaturation),
 * not claimed again at every turn of the loop. The decisions are core/delivery-plan.ts's; one
 * attempt (sign, send through the destination port, breaker, record) is workers/delivery/attempt.ts,
 * the refill of the keys whose attempts settled in a turn workers/delivery/refills.ts.
 *
 * Claims never overlap (one at a time, workers/pooled-loop.ts): the per-key room a claim is sized by
 * cannot be spent by another claim across the claim's await, and every start checks it again.
 */
export class Dispatcher extends PooledWorker<Claim> {
  private readonly maxPerHost: number;
  readonly breakers: CircuitBreakers;
  /** Keys found at their cap across instances: left out of the loop's claims and its next-due probe until their back-off ends. */
  private saturated: ReadonlyMap<string, SaturationNote> = new Map();
  private readonly events: DeliveryLifecycle;
  private readonly attempts: Attempts;
  private readonly refills: Refills;
  /** Events refills leased ahead of their key's cap, waiting for its slots (workers/delivery/ahead.ts). */
  private readonly ahead: LeasedAhead;

  constructor(private readonly opts: DispatcherOptions) {
    // The pool's slots: each client's share, the reserve, the per-key cap, slots held for a key's refill (see withSlot).
    const maxPerHost = Math.max(1, opts.maxPerHost ?? 8);
    super({ size: Math.max(1, opts.maxInFlight ?? 64), maxPerKey: maxPerHost });
    this.maxPerHost = maxPerHost;
    const { config } = opts;
    this.events = new DeliveryLifecycle({
      store: opts.store,
      clock: opts.clock,
      retryScheduleMs: config.webhookRetryScheduleMs,
      ...(opts.random ? { random: opts.random } : {}),
    });
    this.breakers = new CircuitBreakers(opts.clock, {
      coolDownMs: firstCoolDownMs(config.webhookRetryScheduleMs),
      ...opts.breaker,
    });
    this.attempts = new Attempts({
      events: opts.store.events,
      clock: opts.clock,
      logger: opts.logger,
      destinations:
        opts.destinations ??
        webhookDestinations(opts.sender, { allowPrivateNetworks: config.webhookAllowPrivateNetworks }),
      breakers: this.breakers,
      lifecycle: this.events,
      encryptionKey: config.encryptionKey,
      timeoutMs: config.webhookTimeoutMs,
      scheduleSpanMs: config.webhookRetryScheduleMs.reduce((sum, ms) => sum + ms, 0),
      health: opts.health,
      onAttempt: opts.onAttempt,
    });
    const leaseMs = config.webhookTimeoutMs + 5_000;
    this.ahead = new LeasedAhead({
      clock: opts.clock,
      logger: opts.logger,
      lifecycle: this.events,
      cap: maxPerHost,
      leaseMs,
      timeoutMs: config.webhookTimeoutMs,
    });
    this.refills = new Refills({
      ...opts,
      ahead: this.ahead,
      startWaiting: (key) => void this.startAhead(key),
      slots: this.slots,
      loop: this.loop,
      keyRoom: (key) => this.keyRoom(key),
      saturated: () => this.saturated,
      leaseMs,
      maxPerKey: maxPerHost,
    });
    // A changed client's leased-ahead events go back (letGoOfClient); watched for as long as the store lives.
    opts.store.clients.watch((clientId) => this.letGoOfClient(clientId));
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
   * attempts and new events nudge the loop anyway). Open circuits postponed their events to the
   * trial time, so the due index and the next trial say when to wake.
   */
  async nextDueAt(full: boolean): Promise<number | null> {
    if (full) return this.opts.clock.now();
    if (this.slots.claimable <= 0) return null;
    const now = this.opts.clock.now();
    const due = await this.opts.store.events.nextDueAt({
      now,
      excludeKeys: this.excludedKeys(now),
      excludeClients: this.slots.busyClients(),
    });
    return wakeAt({
      now,
      trialDueWithRoom: this.breakers.dueTrials().some((key) => this.hasRoom(key)),
      nextTrialAt: this.breakers.nextTrialAt(),
      due,
      saturatedUntil: [...this.saturated.values()].map((n) => n.until),
    });
  }

  /** How many more attempts may start for this key now (core/delivery-plan.ts, keyRoom). */
  private keyRoom(key: string): number {
    return keyRoom(this.slots.keyRoom(key), this.breakers.allowance(key));
  }

  /** Whether the key and its client both have room here now. */
  private hasRoom(key: string): boolean {
    return this.slots.room(splitDeliveryKey(key)[0]) > 0 && this.keyRoom(key) > 0;
  }

  /** Keys the loop's claim and next-due probe leave out: at their cap or with a trial out here, or saturated by other instances. */
  private excludedKeys(now: number): string[] {
    return excludedKeys(this.slots.keys(), this.saturated, now, (key) => this.keyRoom(key));
  }

  /** Paused keys' due trials first, then the due index within each key's and client's room. */
  async claim(start: (claim: Claim) => void): Promise<{ full: boolean }> {
    const { store, clock, config, owner } = this.opts;
    let room = this.slots.claimable;
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
      if (!this.hasRoom(key)) continue;
      const trial = await claimTrial(
        { ...this.opts, breakers: this.breakers, lifecycle: this.events },
        key,
        leaseMs,
        clientOf,
      );
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
      excludeClients: this.slots.busyClients(),
      clientRoom: (clientId, picked) => this.slots.room(clientId, picked),
    });
    for (const event of claimed) start({ event, client: await clientOf(event.clientId) });
    const full = claimed.length >= room;
    this.saturated = noteSaturation(this.saturated, {
      asked,
      got: new Set(claimed.map((e) => deliveryKey(e.clientId, e.destinationHost))),
      full,
      now,
      hasRoom: (key) => this.hasRoom(key),
    });
    return { full };
  }

  failed(claim: Claim, err: unknown): void {
    this.opts.logger.error({ err, event_id: claim.event.id }, "delivery bookkeeping failed");
  }

  /** A delivery settled: its slot goes first to the same key's next due events (workers/delivery/refills.ts). */
  refill(claim: Claim): Promise<boolean> {
    return claim.refilled ?? this.settled(claim.event);
  }

  /**
   * A delivery settled and its slot is held for its key (withSlot): the key's leased-ahead events
   * take it first, with no claim in between; the key's refill is asked when none waits, or to
   * lease more ahead once few wait (core/delivery-plan.ts, leaseAheadWant). Answers whether the
   * loop need not be woken for it.
   */
  private settled(event: ClaimedEvent): Promise<boolean> {
    const key = deliveryKey(event.clientId, event.destinationHost);
    let started = 0;
    // Another process's change of a client row (the CLI beside the server) is seen before any of
    // the key's leased-ahead events starts: at most one read of PRAGMA data_version per 2 ms.
    this.opts.store.clients.pollChanges();
    if (this.ahead.waiting(key) > 0) {
      this.slots.releaseHold(key, 1);
      started = this.startAhead(key);
    }
    // A refill of the key under way brings its next events: another would only find them leased.
    const underWay = this.refills.underWay(key);
    if (started > 0 && (underWay || this.ahead.want(key, this.slots.inFlightTo(key)) === 0)) {
      // Quiet like a refill that started something: the loop's claim for everyone else runs soon.
      this.refills.sweepSoon();
      return Promise.resolve(true);
    }
    // Not urgent while the key still has leased-ahead events to start, or a refill of it is under
    // way (its events come with that claim's commit): it may wait for a fuller commit.
    const asked = this.refills.ask(event, this.ahead.waiting(key) > 0 || underWay);
    const answer = started > 0 ? asked.then(() => true) : asked;
    return answer.finally(() => {
      if (this.slots.inFlightTo(key) === 0) this.ahead.forget(key);
    });
  }

  /**
   * Starts the key's leased-ahead events while it and its client have room (and the loop accepts
   * work); when none could start and nothing of the key runs to start them later (its circuit
   * opened, its client is at its share), they are given back: due again when the circuit's
   * trial is, or as they were. Returns how many started.
   */
  private startAhead(key: string): number {
    let started = 0;
    while (this.loop.accepting && this.hasRoom(key)) {
      const next = this.ahead.next(key);
      if (!next) break;
      if (this.loop.start(next)) started += 1;
    }
    if (started === 0 && this.ahead.waiting(key) > 0) {
      const idle = this.slots.inFlightTo(key) === 0;
      if (idle || this.breakers.allowance(key) <= 0 || !this.loop.accepting)
        void this.ahead.giveBack(key, this.breakers.openUntil(key), idle);
    }
    return started;
  }

  /**
   * Gives back the client's events leased ahead: one of its endpoints was removed
   * (Nudges.endpointRemoved), or its row changed (ClientStore.watch: a secret rotated, a key
   * revoked, its signing settings; here or on another instance). None of them starts after that
   * with the row read at its claim: those of a removed endpoint were ended by the removal (their
   * give-back changes nothing), the others are due again as they were and claimed anew with the
   * row read then. For null (any client may have changed: another process's commit), the waiting
   * clients' rows are read again and only the events of those that changed go back (LeasedAhead.recheck).
   */
  letGoOfClient(clientId: string | null): void {
    if (clientId !== null) void this.ahead.giveBackOfClient(clientId);
    else
      void this.ahead
        .recheck((id) => this.opts.store.clients.find(id))
        .catch((err: unknown) => {
          this.opts.logger.error({ err }, "reading clients again failed; their leased-ahead events go back");
          return this.ahead.giveBackOfClient(null);
        });
  }

  /** Waits for the work in flight (graceful shutdown), then gives the events leased ahead back. */
  override async drain(): Promise<void> {
    await super.drain();
    await this.ahead.giveBackAll();
  }

  /** A refill asked as the attempt's record was queued (withSlot): the loop waits for it, draining or not. */
  refillAsked(claim: Claim): boolean {
    return claim.refilled !== undefined;
  }

  /**
   * Starts one claimed event: an attempt under its key's cap and breaker (a trial under the permit
   * it was claimed with), or, for an event that cannot be sent, what it gets instead (the trial's
   * permit goes back then, unused). Null when the key has no room after all (a URL stored in a
   * spelling the claim's SQL filter did not recognise): the lease is handed back untouched.
   */
  run(claim: Claim): Promise<void> | null {
    const { event, client, trial } = claim;
    const instead = this.unsendable(event, client, trial ? "client not found" : "no callback_url");
    if (instead) {
      if (trial) this.breakers.record(trial, "neutral");
      return instead();
    }
    const key = deliveryKey(event.clientId, event.destinationHost);
    const permit = trial ?? (this.keyRoom(key) > 0 ? this.breakers.acquire(key) : null);
    if (!permit) {
      // An event due while its key's circuit is open (written after it opened): it waits for the
      // trial like the others. At the cap, or with the trial out: handed back untouched.
      this.events.release(event, this.breakers.openUntil(key)).catch((err: unknown) => {
        this.opts.logger.error({ err, event_id: event.id }, "releasing an event lease failed; it expires on its own");
      });
      return null;
    }
    return this.withSlot(claim, (queued) => this.attempts.deliver(event, client!, permit, queued));
  }

  /** What an event that cannot be sent gets instead of an attempt (no client or URL, a body over the limit), or null. */
  private unsendable(
    event: ClaimedEvent,
    client: ClientRow | undefined,
    noClient: string,
  ): (() => Promise<void>) | null {
    if (!client || !event.callbackUrl) return () => this.events.fail(event, client ? "no callback_url" : noClient);
    const size = Buffer.byteLength(event.payload, "utf8");
    if (size > MAX_PAYLOAD_BYTES) return () => this.attempts.refuseOversized(event, size, MAX_PAYLOAD_BYTES);
    return null;
  }

  /**
   * Holds a slot of the pool (its key's cap, its client's share) while a delivery runs. The slot
   * stays held for its key until the refill (see refill) has used it or given it up, so no other
   * claim, nor the loop's next-due probe, sees the key's room in between.
   */
  private withSlot(claim: Claim, work: (queued: (unchanged: boolean) => void) => Promise<void>): Promise<void> {
    const { event } = claim;
    const slot = this.slots.take(event.clientId, deliveryKey(event.clientId, event.destinationHost));
    let freed = false;
    const free = () => {
      if (!freed) slot.release({ holdKey: this.loop.accepting });
      freed = true;
    };
    // The record is on its way: the turn's commit waits for it (EventStore.recordWindow).
    const expecting = this.opts.store.events.recordWindow?.expect();
    // Where records are written before the claims of their turn (EventStore.recordsBeforeClaims), the
    // slot goes back and the key's refill is asked as the record is queued: the refill's claim shares
    // the record's commit. A crash before that commit loses both, and the lease brings the event back.
    const early = this.opts.store.events.recordsBeforeClaims;
    const startedAt = this.opts.clock.now();
    const queued = (unchanged: boolean) => {
      expecting?.();
      this.ahead.timed(slot.key, this.opts.clock.now() - startedAt);
      if (!early || !unchanged || !this.loop.accepting) return;
      free();
      claim.refilled = this.settled(event);
    };
    return work(queued).finally(() => {
      expecting?.();
      free();
    });
  }

  /**
   * A test ping (POST /webhooks/test) through the same guard, signer, per-key cap and breaker as
   * real deliveries: it cannot crowd a receiver past the cap, nor reach a key whose circuit is open.
   * Returns null when the key has no room now, or the client none in the pool (the caller answers 429).
   */
  async ping(message: DestinationMessage): Promise<SendResult | null> {
    const clientId = message.target.tenant;
    const key = deliveryKey(clientId, destinationHost(message.target.address));
    // A ping is the client's own work: within its share of the pool, like its deliveries.
    const slot = this.breakers.allowance(key) > 0 ? this.slots.tryAcquire(clientId, key) : null;
    const permit = slot ? this.breakers.acquire(key) : null;
    if (!slot || !permit) {
      slot?.release();
      return null;
    }
    try {
      return await this.attempts.ping(permit, message);
    } finally {
      slot.release();
    }
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
}

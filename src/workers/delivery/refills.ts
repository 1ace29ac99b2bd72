import type { Clock } from "../../clock.js";
import {
  quietAfterRefill,
  refillClaimsAhead,
  refillOutcomes,
  refillPlan,
  type RefillOutcome,
  type SaturationNote,
} from "../../core/delivery-plan.js";
import type { FairPool } from "../../core/fair-pool.js";
import type { Logger } from "../../logger.js";
import { deliveryKey } from "../../store/delivery-key.js";
import type { ClientStore, EventStore } from "../../store/store.js";
import type { ClientRow, ClaimedEvent } from "../../store/rows.js";
import type { LeaseOwner } from "../owner.js";
import type { PooledLoop } from "../pooled-loop.js";
import type { LeasedAhead } from "./ahead.js";
import type { Claim } from "./trials.js";

/** A key asking for its refill: the client and host its settled attempt went to, and the settles waiting for the answer. */
interface RefillAsk {
  key: string;
  clientId: string;
  host: string;
  waiters: Array<(quiet: boolean) => void>;
}

/** What the refills need: the pool and its loop, the key's room and saturation as the dispatcher sees them, the claim. */
export interface RefillDeps {
  store: { events: Pick<EventStore, "claimOfKeys" | "recordWindow">; clients: Pick<ClientStore, "find"> };
  clock: Clock;
  owner: Pick<LeaseOwner, "token">;
  logger: Logger;
  slots: FairPool;
  loop: Pick<PooledLoop<Claim>, "claimAndStart" | "onSettled">;
  keyRoom: (key: string) => number;
  saturated: () => ReadonlyMap<string, SaturationNote>;
  leaseMs: number;
  maxPerKey: number;
  /** Events leased ahead of the keys' cap: how many more a key may lease, and where those wait. */
  ahead: Pick<LeasedAhead, "want" | "limit" | "add" | "rowsRead" | "refilled">;
  /** After a claim left events of the key waiting: starts what has room, gives them back if nothing of the key runs to start them. */
  startWaiting: (key: string) => void;
}

/** How soon after a refill the loop claims for everyone else (a new client's events wait at most this long for it). */
const SWEEP_AFTER_REFILL_MS = 200;

/**
 * A settled delivery's slot goes first to the same key's next due events, and the loop is woken
 * for everything else: a steady stream to one receiver costs no scan of the whole due index per
 * webhook. Every attempt settled in one turn of the event loop is refilled by one claim
 * (EventStore.claimOfKeys: one statement across their keys), each key within its cap and its
 * client's share (core/delivery-plan.ts, refillPlan). A refilled slot leaves the pool as full as it
 * was: the loop's claim of everything else (other clients' due events, which may need the
 * reserve) runs soon, not once per webhook.
 */
export class Refills {
  /** Keys whose attempts settled in this turn, refilled together at its end. */
  private asks: Map<string, RefillAsk> | null = null;
  /** Whether every key of `asks` may wait for the records' commit to linger (see ask). */
  private lingering = false;
  /** Keys whose refill's claim is under way (asked, not yet answered), with how many such refills. */
  private readonly claiming = new Map<string, number>();
  private sweepTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: RefillDeps) {}

  /**
   * Asks for the refill of a settled event's key; answers whether the loop need not be woken for it.
   * `linger`: the key still has leased-ahead events to start, so its refill is not urgent and may
   * wait for the records' commit to fill (up to RECORD_LINGER_MS) rather than end it within a
   * hold: the turn's claim then shares a commit of tens of records, not of a few. An ask without it
   * (a key with nothing left to start) ends the wait for every key of the turn (RecordWindow.hurry).
   */
  ask(event: ClaimedEvent, linger = false): Promise<boolean> {
    const key = deliveryKey(event.clientId, event.destinationHost);
    return new Promise((resolve) => {
      if (!this.asks) {
        this.asks = new Map();
        this.lingering = linger;
        // As the records' commit closes (the claim then shares it), else at the end of this turn. A
        // microtask later: a settle asks just before its record is queued, which opens that commit.
        const turn = () => void this.turn();
        queueMicrotask(() => {
          if (!this.deps.store.events.recordWindow?.beforeCommit(turn, { linger: this.lingering })) setImmediate(turn);
        });
      } else if (this.lingering && !linger) {
        this.lingering = false;
        this.deps.store.events.recordWindow?.hurry();
      }
      const ask = this.asks.get(key);
      if (ask) ask.waiters.push(resolve);
      else this.asks.set(key, { key, clientId: event.clientId, host: event.destinationHost, waiters: [resolve] });
    });
  }

  /**
   * Whether a refill of the key is under way: its claim runs, or waits for the commit it joined.
   * A settle of the key then need not hurry a commit for it: events are on their way.
   */
  underWay(key: string): boolean {
    return this.claiming.has(key);
  }

  /** The refills asked for in one turn, claimed together; each settle learns whether the loop need not be woken for it. */
  private async turn(): Promise<void> {
    const asks = [...(this.asks?.values() ?? [])];
    const linger = this.lingering;
    this.asks = null;
    const outcome = new Map<string, RefillOutcome>();
    for (const ask of asks) this.claiming.set(ask.key, (this.claiming.get(ask.key) ?? 0) + 1);
    try {
      await this.deps.loop.claimAndStart((start) => this.claimOfKeys(asks, linger, start, outcome));
    } catch (err) {
      this.deps.logger.error({ err, keys: asks.length }, "claiming keys' next events failed; the loop claims them");
    } finally {
      for (const ask of asks) {
        const n = this.claiming.get(ask.key) ?? 1;
        if (n <= 1) this.claiming.delete(ask.key);
        else this.claiming.set(ask.key, n - 1);
      }
    }
    const now = this.deps.clock.now();
    const saturated = this.deps.saturated();
    for (const ask of asks) {
      const quiet = quietAfterRefill(outcome.get(ask.key), saturated.get(ask.key), now);
      if (quiet) this.sweepSoon();
      for (const resolve of ask.waiters) resolve(quiet);
    }
  }

  /** Wakes the loop within SWEEP_AFTER_REFILL_MS, once for any number of refills meanwhile (also after a leased-ahead start). */
  sweepSoon(): void {
    if (this.sweepTimer) return;
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = null;
      this.deps.loop.onSettled();
    }, SWEEP_AFTER_REFILL_MS);
    this.sweepTimer.unref();
  }

  /**
   * The next due events of the keys whose settled attempts freed and held their slots, in one
   * claim: the plan gives each key its limit, the store's one statement applies them. The held
   * slots go back once the claim has answered, before its events start. `outcome`: per key.
   */
  private async claimOfKeys(
    asks: readonly RefillAsk[],
    linger: boolean,
    start: (claim: Claim) => boolean,
    outcome: Map<string, RefillOutcome>,
  ): Promise<{ full: boolean }> {
    const { store, clock, owner, slots } = this.deps;
    const held = new Map(asks.map((a) => [a.key, slots.heldFor(a.key)]));
    let released = false;
    const release = () => {
      if (!released) for (const [key, n] of held) slots.releaseHold(key, n);
      released = true;
    };
    try {
      const plan = refillPlan(
        asks.map((a) => ({
          key: a.key,
          clientId: a.clientId,
          keyRoom: this.deps.keyRoom(a.key),
          held: held.get(a.key)!,
        })),
        (clientId, picked) => slots.room(clientId, picked),
        slots.claimable,
      );
      const { claims, settled } = refillClaimsAhead(plan, (i) =>
        this.deps.ahead.want(asks[i]!.key, slots.inFlightTo(asks[i]!.key)),
      );
      for (const [key, o] of settled) outcome.set(key, o);
      if (claims.length === 0) return { full: false };
      const claimed = await store.events.claimOfKeys(
        claims.map(({ index, limit, key }) => ({
          clientId: asks[index]!.clientId,
          host: asks[index]!.host,
          limit,
          leaseAhead: this.deps.ahead.limit(key),
        })),
        { now: clock.now(), leaseMs: this.deps.leaseMs, token: owner.token(), maxPerKey: this.deps.maxPerKey, linger },
      );
      const clients = new Map<string, ClientRow | undefined>();
      const read = this.deps.ahead.rowsRead();
      for (const event of claimed)
        if (!clients.has(event.clientId)) clients.set(event.clientId, await store.clients.find(event.clientId));
      release();
      const starts = new Map(claims.map((c) => [c.key, c.starts]));
      const got = new Map<string, { claimed: number; started: number }>();
      for (const event of claimed) {
        const key = deliveryKey(event.clientId, event.destinationHost);
        const n = got.get(key) ?? { claimed: 0, started: 0 };
        n.claimed += 1;
        const claim = { event, client: clients.get(event.clientId) };
        // The key's room to start now first; the rest wait leased ahead for its slots to free.
        if (n.claimed > (starts.get(key) ?? 0)) this.deps.ahead.add(key, claim, read);
        else if (start(claim)) n.started += 1;
        got.set(key, n);
      }
      for (const [key, n] of got) if (n.claimed > (starts.get(key) ?? 0)) this.deps.startWaiting(key);
      for (const c of claims) this.deps.ahead.refilled(c.key, c.limit, got.get(c.key)?.claimed ?? 0);
      for (const [key, o] of refillOutcomes(claims, got)) outcome.set(key, o);
      return { full: claimed.length >= claims.reduce((sum, c) => sum + c.limit, 0) };
    } finally {
      release();
    }
  }
}

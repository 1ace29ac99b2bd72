import type { Clock } from "../../clock.js";
import { AHEAD_START_MARGIN_MS, leaseAheadLimit, leaseAheadWant, mayStartAhead } from "../../core/delivery-plan.js";
import type { DeliveryLifecycle } from "../../core/delivery.js";
import type { Logger } from "../../logger.js";
import type { ClientRow } from "../../store/rows.js";
import type { Claim } from "./trials.js";

/** One key's leased-ahead events, in due order, and its recent attempt time (ms, smoothed). */
interface KeyAhead {
  waiting: Claim[];
  attemptMs: number | undefined;
  /** The key's last refill found fewer events than it asked for (leaseAheadWant's `dry`). */
  dry: boolean;
}

export interface LeasedAheadDeps {
  clock: Clock;
  logger: Logger;
  lifecycle: Pick<DeliveryLifecycle, "release">;
  /** The per-key in-flight cap. */
  cap: number;
  /** A claim's lease, and an attempt's timeout: a leased-ahead event may wait their difference less the margin. */
  leaseMs: number;
  timeoutMs: number;
}

/**
 * Events a key's refill leased ahead of its in-flight cap (core/delivery-plan.ts, leaseRoom): they
 * hold no slot of the pool and wait here, per key in due order, until the key's own attempts
 * settle and free a slot (Dispatcher.settled starts them, no claim in between). One whose lease
 * no longer outlasts an attempt is given back instead of started, and a key's waiting events are
 * given back when nothing of the key is left to start them (its circuit opened, its client has
 * no room) and on shutdown; a kill -9 leaves them to their lease's end, like any claimed event.
 */
export class LeasedAhead {
  private readonly keys = new Map<string, KeyAhead>();

  constructor(private readonly deps: LeasedAheadDeps) {}

  /** How many of the key's events wait leased ahead. */
  waiting(key: string): number {
    return this.keys.get(key)?.waiting.length ?? 0;
  }

  /** How many more of the key's events its refill may lease ahead now. */
  want(key: string, inFlight: number): number {
    const dry = this.keys.get(key)?.dry === true;
    return leaseAheadWant({ cap: this.deps.cap, limit: this.limit(key), inFlight, waiting: this.waiting(key), dry });
  }

  /** The key's refill asked for `asked` events and got `got`: fewer, and its next refill waits until few are left. */
  refilled(key: string, asked: number, got: number): void {
    this.keyOf(key).dry = got < asked;
  }

  /** The most of the key's events this instance may hold leased at once (what the claim's store is told). */
  limit(key: string): number {
    const { cap, leaseMs, timeoutMs } = this.deps;
    const attemptMs = this.keys.get(key)?.attemptMs;
    return leaseAheadLimit({ cap, waitMs: leaseMs - timeoutMs - AHEAD_START_MARGIN_MS, attemptMs });
  }

  /** An attempt of the key took `ms` (start to its record queued): the key's attempt time, smoothed. */
  timed(key: string, ms: number): void {
    const k = this.keyOf(key);
    k.attemptMs = k.attemptMs === undefined ? ms : (k.attemptMs + ms) / 2;
  }

  /**
   * A claimed event to wait for a slot of its key; `read`: rowsRead() when its client's row was
   * read. A client row changed since is not trusted: the event goes back to be claimed anew.
   */
  add(key: string, claim: Claim, read: number): void {
    if (read !== this.generation) void this.giveBackOne(claim, null);
    else this.keyOf(key).waiting.push(claim);
  }

  /** The key's next waiting event that may still start; those whose lease ran too short on the way are given back. */
  next(key: string): Claim | undefined {
    const k = this.keys.get(key);
    if (!k) return undefined;
    const now = this.deps.clock.now();
    for (let claim = k.waiting.shift(); claim; claim = k.waiting.shift()) {
      if (mayStartAhead(claim.event.claimedUntil, now, this.deps.timeoutMs)) return claim;
      void this.giveBackOne(claim, null);
    }
    return undefined;
  }

  /** Hands the key's waiting events back (due again at `until`, or as they were), and forgets the key when it is idle. */
  giveBack(key: string, until: number | null, idle: boolean): Promise<void> {
    const k = this.keys.get(key);
    if (!k) return Promise.resolve();
    const claims = k.waiting.splice(0);
    if (idle) this.keys.delete(key);
    return Promise.all(claims.map((c) => this.giveBackOne(c, until))).then(() => undefined);
  }

  /** Forgets a key with nothing waiting (its attempt time goes too: a key's next burst measures it again). */
  forget(key: string): void {
    if (this.waiting(key) === 0) this.keys.delete(key);
  }

  /**
   * A generation of the client rows the waiting events were started with: bumped by every
   * giveBackOfClient. A refill reads its clients' rows before its events are added (add's `read`):
   * one whose rows were read before a change is given back, not kept with a row that may be stale.
   */
  private generation = 0;

  /** The generation to pass to add for a client row read now. */
  rowsRead(): number {
    return this.generation;
  }

  /**
   * The client's waiting events back, as they were (every client's for null): one of its endpoints
   * was removed, or its row changed (a secret rotated, a key revoked, its settings): they are
   * claimed anew and start with the row read then, never with the one read at their claim.
   */
  giveBackOfClient(clientId: string | null): Promise<void> {
    this.generation++;
    const given: Promise<void>[] = [];
    for (const k of this.keys.values()) {
      const theirs = clientId === null ? k.waiting : k.waiting.filter((c) => c.event.clientId === clientId);
      if (theirs.length === 0) continue;
      k.waiting = clientId === null ? [] : k.waiting.filter((c) => c.event.clientId !== clientId);
      for (const claim of theirs) given.push(this.giveBackOne(claim, null));
    }
    return Promise.all(given).then(() => undefined);
  }

  /**
   * Any client's row may have changed (ClientStore.watch's null: another process committed, such as
   * the CLI or the parse worker's connection, or a PostgreSQL listener reconnected): each waiting
   * client's row is read again, and the events that started from a row that differs in anything but
   * its running counters go back to be claimed anew. Most such signals change no client: nothing
   * goes back then.
   */
  async recheck(find: (clientId: string) => Promise<ClientRow | undefined>): Promise<void> {
    this.generation++;
    const fresh = new Map<string, ClientRow | undefined>();
    for (const k of this.keys.values()) for (const c of k.waiting) fresh.set(c.event.clientId, undefined);
    for (const id of fresh.keys()) fresh.set(id, await find(id));
    const given: Promise<void>[] = [];
    for (const k of this.keys.values()) {
      const stale = (c: Claim) =>
        fresh.has(c.event.clientId) && !sameForAttempts(c.client, fresh.get(c.event.clientId));
      if (!k.waiting.some(stale)) continue;
      for (const claim of k.waiting.filter(stale)) given.push(this.giveBackOne(claim, null));
      k.waiting = k.waiting.filter((c) => !stale(c));
    }
    await Promise.all(given);
  }

  /** Every key's waiting events back (shutdown, after the attempts in flight settled). */
  async giveBackAll(): Promise<void> {
    await Promise.all([...this.keys.keys()].map((key) => this.giveBack(key, null, true)));
  }

  private keyOf(key: string): KeyAhead {
    let k = this.keys.get(key);
    if (!k) this.keys.set(key, (k = { waiting: [], attemptMs: undefined, dry: false }));
    return k;
  }

  private giveBackOne(claim: Claim, until: number | null): Promise<void> {
    return this.deps.lifecycle.release(claim.event, until).catch((err: unknown) => {
      this.deps.logger.error(
        { err, event_id: claim.event.id },
        "giving back a leased-ahead event failed; its lease expires on its own",
      );
    });
  }
}

/** A client's columns that change with its tasks (credits, admission, the event sequence): not what an attempt is sent with. */
const RUNNING_COUNTERS: ReadonlySet<string> = new Set([
  "pointsCharged",
  "pointsRefunded",
  "pointsReserved",
  "eventSeq",
  "lastAdmittedAt",
]);

/** Whether two reads of a client's row agree on everything but its running counters. */
export function sameForAttempts(a: ClientRow | undefined, b: ClientRow | undefined): boolean {
  if (a === b) return true;
  if (!a || !b) return false;
  const x = a as unknown as Record<string, unknown>;
  const y = b as unknown as Record<string, unknown>;
  for (const key of new Set([...Object.keys(x), ...Object.keys(y)]))
    if (!RUNNING_COUNTERS.has(key) && x[key] !== y[key]) return false;
  return true;
}

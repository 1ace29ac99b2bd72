/**
 * The tenant-fair pool (docs/contract.md, "One fair pool"; docs/decisions/0008-fair-pool.md): one mechanism for every
 * resource the relay's tenants share — webhook attempts, failure notices, output copies, dashboard
 * previews — so a worker or route added later inherits isolation by taking its slots here.
 *
 * A pool of `size` slots, each held by one client's work under a key (the client's work to one
 * host). The rules, all in `room` and `keyRoom`:
 *  - **Share.** The pool less its reserve is split evenly among the clients holding slots, counting
 *    the one asking: a client at its share starts nothing more while others hold slots, and a
 *    slot it frees goes to the others first. Alone, a client may use all of it.
 *  - **Reserve.** The last `reserve` slots (an eighth) are only for clients below their share that
 *    hold fewer than `reserveLevel` slots: a client whose work just became due finds a slot at
 *    once, also while one of its own attempts is slow, whatever the others' backlogs.
 *  - **Per key.** At most `maxPerKey` slots per key (one client's work to one host), less slots
 *    held for the key's refill (release with `holdKey`).
 *  - **In line.** A client that asks below its share has due work: it counts in every share, and
 *    free slots are kept for it against any client holding more, or as many and asking later, until
 *    it takes one. A waiting client is served within as many releases as were in line before it,
 *    however many clients are hostile (docs/decisions/0008-fair-pool.md, #38.2).
 *  - **Taken back.** A client in line below its share and the reserve's level (it has due work and
 *    little or nothing in flight) that finds the pool full (the reserve included: other clients
 *    that came later took it) takes a slot back from the client holding
 *    the most, when that one holds more than its share (it took them while it was alone): the
 *    slot is counted for the one in line at once. The work it held runs on, uncounted, until it
 *    ends (its deadline bounds it), and its end frees nothing; its key stays counted, so per-host
 *    caps hold. So a client with due work gets a slot at its first ask however many hostile
 *    clients came before it; uncounted work is capped at the pool's size, so what runs stays within
 *    twice the pool. That is the bound a share over holders alone, or a reserve of fixed size,
 *    cannot give against 2 or 3 hostile clients (#38.2).
 *
 * Pure bookkeeping, synchronous; `acquire` may wait for a slot, served fairly (the waiting client
 * holding the fewest slots first) as slots are released.
 */

export interface FairPoolOptions {
  /** Slots in the pool: every client's work at once. */
  size: number;
  /** Slots one key (one client's work to one host) may hold at once; default the whole pool. */
  maxPerKey?: number;
  /** Slots kept for clients below their share; default an eighth of the pool (at least 1 once it has 2). */
  reserve?: number;
  /** A client below its share takes from the reserve while it holds fewer slots than this; default max(2, half the reserve). */
  reserveLevel?: number;
  /** Acquisitions one client may have waiting (acquire with waitMs); beyond, acquire answers null at once. Default: the pool's size. */
  maxWaitingPerClient?: number;
  /**
   * How long a client that asked below its share stays in line without asking again (its claim
   * loop asks at least once a second); default 2,000 ms.
   */
  waitingTtlMs?: number;
  /** The clock for waiting clients (default Date.now, which a test's fake timers drive). */
  now?: () => number;
}

/** One slot of the pool, held by a client's work under a key. */
export interface Slot {
  readonly clientId: string;
  readonly key: string;
  /**
   * Frees the slot; later calls do nothing. With `holdKey` the key's room stays taken (the slot
   * goes back to the pool, not to the key's cap) until releaseHold: the key's next work takes it.
   */
  release(opts?: { holdKey?: boolean }): void;
}

interface Waiter {
  clientId: string;
  key: string;
  grant: (slot: Slot | null) => void;
}

const NOTHING_PICKED: ReadonlyMap<string, number> = new Map();

/** A client refused below its share: its place in line (a counter, so ties cannot happen), and when it last asked. */
interface Wanting {
  since: number;
  askedAt: number;
}

export class FairPool {
  readonly size: number;
  readonly maxPerKey: number;
  readonly reserve: number;
  readonly reserveLevel: number;
  /** The slots outside the reserve, shared among the clients holding slots. */
  private readonly general: number;
  private readonly maxWaitingPerClient: number;
  private total = 0;
  private readonly byClient = new Map<string, number>();
  /** Each client's counted slots, oldest first: the newest is the one taken back. */
  private readonly slotsOf = new Map<string, Set<{ counted: boolean }>>();
  /** Work whose slot was taken back, still running. */
  private uncounted = 0;
  private readonly byKey = new Map<string, number>();
  private readonly heldForKey = new Map<string, number>();
  private readonly waiting: Waiter[] = [];
  /** Clients that asked below their share and took no slot since, first in line first (Map order). */
  private readonly wanting = new Map<string, Wanting>();
  private readonly waitingTtlMs: number;
  private readonly now: () => number;
  private line = 0;

  constructor(opts: FairPoolOptions) {
    this.size = Math.max(1, Math.floor(opts.size));
    this.maxPerKey = Math.max(1, Math.floor(opts.maxPerKey ?? this.size));
    this.reserve = Math.min(
      this.size - 1,
      Math.max(0, Math.floor(opts.reserve ?? (this.size > 1 ? Math.ceil(this.size / 8) : 0))),
    );
    this.general = this.size - this.reserve;
    this.reserveLevel = Math.max(1, Math.floor(opts.reserveLevel ?? Math.max(2, Math.ceil(this.reserve / 2))));
    this.maxWaitingPerClient = Math.max(0, Math.floor(opts.maxWaitingPerClient ?? this.size));
    this.waitingTtlMs = Math.max(0, opts.waitingTtlMs ?? 2_000);
    this.now = opts.now ?? (() => Date.now());
  }

  /** Slots held now, by every client. */
  get inUse(): number {
    return this.total;
  }

  /** Work running on slots taken back from it (it ends by its deadline; its end frees no slot). */
  get runningUncounted(): number {
    return this.uncounted;
  }

  /** Slots free now (some may be kept for clients below their share). */
  get free(): number {
    return this.size - this.total;
  }

  /**
   * Slots a claim may find now: the free ones, and those a client with due work and nothing in
   * flight would take back from above the others' shares. A claim loop sizes its claim by this,
   * not by `free`, so a full pool still asks the clients in line (and they take slots back).
   */
  get claimable(): number {
    this.forgetQuiet(this.now());
    let active = this.byClient.size + 1;
    for (const id of this.wanting.keys()) if (!this.byClient.has(id)) active += 1;
    const share = Math.max(1, Math.floor(this.general / active));
    let above = 0;
    for (const n of this.byClient.values()) above += Math.max(0, n - share);
    return this.free + above;
  }

  inFlightOf(clientId: string): number {
    return this.byClient.get(clientId) ?? 0;
  }

  inFlightTo(key: string): number {
    return this.byKey.get(key) ?? 0;
  }

  /**
   * How many more slots a client may take now. `picked`: what a claim being made has taken so far
   * per client and not yet started (counted as held), so one claim cannot give the reserve away.
   * Asking is a sign of due work: a client that asks below its share is in line (for
   * `waitingTtlMs` after it last asked, or until it takes a slot), and free slots are kept for
   * those in line that hold fewer slots than the asker, or as few and asked first.
   */
  room(clientId: string, picked: ReadonlyMap<string, number> = NOTHING_PICKED): number {
    return this.roomOf(clientId, picked, true);
  }

  /** Clients in line now, first in line first (they asked below their share and took no slot since). */
  waitingClients(): string[] {
    this.forgetQuiet(this.now());
    return [...this.wanting.keys()];
  }

  private roomOf(clientId: string, picked: ReadonlyMap<string, number>, asking: boolean): number {
    const now = this.now();
    this.forgetQuiet(now);
    let total = this.total;
    let active = this.byClient.size;
    for (const [id, n] of picked) {
      total += n;
      if (n > 0 && !this.byClient.has(id)) active += 1;
    }
    const has = this.inFlightOf(clientId) + (picked.get(clientId) ?? 0);
    // The share is over every client with work: those holding slots and those waiting for one.
    for (const id of this.wanting.keys()) if (id !== clientId && this.heldOrPicked(id, picked) === 0) active += 1;
    if (has === 0) active += 1;
    const share = Math.max(1, Math.floor(this.general / active));
    if (has >= share) return 0;
    const mine = this.wanting.get(clientId);
    const since = mine?.since ?? this.line + 1;
    // Freed slots go to the waiting clients ahead of this one first (fewest held, then oldest).
    let ahead = 0;
    for (const [id, w] of this.wanting) {
      if (id === clientId || (picked.get(id) ?? 0) > 0) continue;
      const theirs = this.inFlightOf(id);
      if (theirs < has || (theirs === has && w.since < since)) ahead += 1;
    }
    const free = this.size - total - ahead;
    const general = this.general - total - ahead;
    let room: number;
    if (free <= 0) room = 0;
    else if (general > 0) room = Math.min(share - has, general);
    // Only the reserve is left: for a client below its share that holds few slots.
    else room = Math.max(0, Math.min(share, this.reserveLevel, has + free) - has);
    // Asked below its share: it has due work, and is in line until it takes a slot (a claim that
    // asked and then filled up with others' work leaves it first in line for the next freed slot).
    if (asking) {
      if (!mine) this.line = since;
      this.wanting.set(clientId, { since, askedAt: now });
      // Nothing free for it, none ahead of it in line: a slot comes back from above someone's share.
      if (room === 0 && ahead === 0 && has < this.reserveLevel && this.takeBackFor(clientId, share, picked)) return 1;
    }
    return room;
  }

  /** Takes back the newest slot of the client holding the most, when it holds more than `share`; true when one came back. */
  private takeBackFor(clientId: string, share: number, picked: ReadonlyMap<string, number>): boolean {
    // Never more uncounted work than the pool: what runs stays within twice its size.
    if (this.uncounted >= this.size) return false;
    let from: string | null = null;
    for (const [id, n] of this.byClient)
      if (id !== clientId && n > share && (from === null || n > this.byClient.get(from)!)) from = id;
    if (from === null || this.heldOrPicked(from, picked) <= share) return false;
    let newest: { counted: boolean } | undefined;
    for (const rec of this.slotsOf.get(from) ?? []) newest = rec;
    if (!newest) return false;
    newest.counted = false;
    const held = this.slotsOf.get(from)!;
    held.delete(newest);
    if (held.size === 0) this.slotsOf.delete(from);
    this.uncounted += 1;
    this.total -= 1;
    bump(this.byClient, from, -1);
    return true;
  }

  private heldOrPicked(clientId: string, picked: ReadonlyMap<string, number>): number {
    return this.inFlightOf(clientId) + (picked.get(clientId) ?? 0);
  }

  /** Forgets waiting clients that stopped asking (their work was done elsewhere, or is gone). */
  private forgetQuiet(now: number): void {
    for (const [id, w] of this.wanting) if (now - w.askedAt > this.waitingTtlMs) this.wanting.delete(id);
  }

  /** How many more slots a key may take now: its cap less what it holds and what is held for its refill. */
  keyRoom(key: string): number {
    return this.maxPerKey - this.inFlightTo(key) - (this.heldForKey.get(key) ?? 0);
  }

  /** Clients holding slots that may take no more now (the list is bounded by the pool's size). */
  busyClients(): string[] {
    const busy: string[] = [];
    for (const clientId of this.byClient.keys())
      if (this.roomOf(clientId, NOTHING_PICKED, false) <= 0) busy.push(clientId);
    return busy;
  }

  /** Keys holding slots or held for a refill (bounded by the pool's size). */
  keys(): string[] {
    return [...new Set([...this.byKey.keys(), ...this.heldForKey.keys()])];
  }

  /** A slot now, within the client's room and the key's; null when there is none. */
  tryAcquire(clientId: string, key: string): Slot | null {
    // The key first: a client asking for a key it has no room under is not in line for a slot.
    if (this.keyRoom(key) <= 0 || this.room(clientId) <= 0) return null;
    return this.take(clientId, key);
  }

  /**
   * Takes a slot without asking: for work a claim already sized by `room` and `keyRoom` (the
   * dispatcher's claims never overlap, so the room they were sized by is still there).
   */
  take(clientId: string, key: string): Slot {
    this.wanting.delete(clientId);
    this.total += 1;
    bump(this.byClient, clientId, 1);
    bump(this.byKey, key, 1);
    const rec = { counted: true };
    let mine = this.slotsOf.get(clientId);
    if (!mine) this.slotsOf.set(clientId, (mine = new Set()));
    mine.add(rec);
    let released = false;
    return {
      clientId,
      key,
      release: (opts) => {
        if (released) return;
        released = true;
        bump(this.byKey, key, -1);
        if (opts?.holdKey) bump(this.heldForKey, key, 1);
        // Taken back: its count went to the client in line; its end frees nothing more.
        if (!rec.counted) {
          this.uncounted -= 1;
          return;
        }
        this.total -= 1;
        bump(this.byClient, clientId, -1);
        const held = this.slotsOf.get(clientId)!;
        held.delete(rec);
        if (held.size === 0) this.slotsOf.delete(clientId);
        this.serveWaiting();
      },
    };
  }

  /** Slots held for a key's refill (release with holdKey) and not yet handed back. */
  heldFor(key: string): number {
    return this.heldForKey.get(key) ?? 0;
  }

  /** Hands back `n` slots held for the key's refill. */
  releaseHold(key: string, n: number): void {
    if (n <= 0) return;
    bump(this.heldForKey, key, -Math.min(n, this.heldFor(key)));
    this.serveWaiting();
  }

  /**
   * A slot now, or the first one this client is given within `waitMs` as others are released
   * (the waiting client holding the fewest slots first, then the longest waiting); null when none
   * came in time, the signal aborted, or the client already has `maxWaitingPerClient` waiting.
   */
  acquire(clientId: string, key: string, opts: { waitMs: number; signal?: AbortSignal }): Promise<Slot | null> {
    if (opts.signal?.aborted) return Promise.resolve(null);
    const queued = this.waiting.filter((w) => w.clientId === clientId).length;
    if (queued === 0) {
      const slot = this.tryAcquire(clientId, key);
      if (slot) return Promise.resolve(slot);
    }
    if (queued >= this.maxWaitingPerClient || opts.waitMs <= 0) return Promise.resolve(null);
    return new Promise<Slot | null>((resolve) => {
      const give = (slot: Slot | null) => {
        clearTimeout(timer);
        opts.signal?.removeEventListener("abort", abandon);
        resolve(slot);
      };
      const waiter: Waiter = { clientId, key, grant: give };
      const abandon = () => {
        const at = this.waiting.indexOf(waiter);
        if (at !== -1) this.waiting.splice(at, 1);
        give(null);
      };
      const timer = setTimeout(abandon, opts.waitMs);
      timer.unref?.();
      opts.signal?.addEventListener("abort", abandon, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** Acquisitions waiting for a slot now. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Gives freed slots to waiters: of those with room, the client holding the fewest slots first, then the longest waiting. */
  private serveWaiting(): void {
    while (this.waiting.length > 0) {
      let best = -1;
      for (let i = 0; i < this.waiting.length; i++) {
        const w = this.waiting[i]!;
        if (this.roomOf(w.clientId, NOTHING_PICKED, false) <= 0 || this.keyRoom(w.key) <= 0) continue;
        if (best === -1 || this.inFlightOf(w.clientId) < this.inFlightOf(this.waiting[best]!.clientId)) best = i;
      }
      if (best === -1) return;
      const [w] = this.waiting.splice(best, 1);
      w!.grant(this.take(w!.clientId, w!.key));
    }
  }
}

function bump(counts: Map<string, number>, key: string, by: number): void {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

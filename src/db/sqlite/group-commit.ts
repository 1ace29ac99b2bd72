import { TURN_WORK_MS } from "../../next-turn.js";
import { checkNumber } from "../../store/values.js";
import type { Db } from "./open.js";
import { clientOf } from "./prepared.js";
import { PacedSettles, SETTLE_BUDGET_MS, SETTLES_PER_TURN } from "./paced-settles.js";
import { inSavepoint } from "./savepoint.js";
import type { Tx } from "./tx.js";
import type { WalSync } from "./wal-sync.js";

interface Pending<T> {
  work: (tx: Tx) => T;
  /** The unit leaves nothing written when it throws (one statement, or its own savepoint): no savepoint around it. */
  atomic: boolean;
  /** UnitOptions.withPrevious: no budget cut between this unit and the one queued before it. */
  withPrevious: boolean;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

/**
 * How long one flush may run units before it commits what it ran and yields the rest to a later
 * turn: a flush of hundreds of units (one turn of creations, records and takes) ran 20-39 ms of one
 * turn in bench/big-outputs.mjs, and every other request waited behind it (issue #38 item 7). The
 * turn's one budget for background work (next-turn.ts), which a store's flushes share (TurnBound.shared).
 */
export const TURN_BUDGET_MS = TURN_WORK_MS;

/**
 * Units a flush always runs before the budget may cut it, so that a thread descheduled on a busy
 * machine still commits something each turn. Kept small: the workers' units (a transition with its
 * events, an attempt's record) cost up to about 1 ms each under load, and a floor of 32 let one
 * flush run 20-31 ms of a turn past its budget (bench/big-outputs.mjs, bench/lib/late-turns.mjs,
 * issue #38 item 7). What must commit together says so itself (UnitOptions.withPrevious).
 */
export const MIN_UNITS_PER_TURN = 4;

/** How a unit is queued. */
export interface UnitOptions {
  /**
   * A budget cut never falls between this unit and the one queued right before it: a write that
   * follows another in the same turn and must share its transaction (an attempt's record and its
   * key's health change) asks for it. It only ever keeps a cut from falling there.
   */
  withPrevious?: boolean;
  /**
   * The unit may wait in its batch for announced writes (expect()) up to the commit's `lingerMs`
   * once a second one has come (GroupCommit.lingerOn), not just holdMs: attempts' records, so that
   * a commit carries tens of them rather than a few (one COMMIT, its WAL frames and its sync per
   * batch). A unit queued without it (a claim) ends the wait at most holdMs after the batch's
   * first write, as before.
   */
  linger?: boolean;
}

/** A flush's COMMIT writes the WAL without syncing it (WalSync syncs it off the loop); every other write syncs at its COMMIT. */
const SYNC_NORMAL = "PRAGMA synchronous = NORMAL";
const SYNC_FULL = "PRAGMA synchronous = FULL";

/** The bound on one turn's flush (TURN_BUDGET_MS, MIN_UNITS_PER_TURN), and its clock. */
export interface TurnBound {
  budgetMs?: number;
  minUnits?: number;
  now?: () => number;
  /** Committed units settled per turn, at most (SETTLES_PER_TURN). */
  settlesPerTurn?: number;
  /** How long a turn settles committed units (SETTLE_BUDGET_MS). */
  settleBudgetMs?: number;
  /**
   * The clock of the turn shared with the process's other background work (next-turn.ts, turnTime):
   * a flush runs at most what is left of it, past its floor, so the store's two group commits and
   * the workers' upstream calls together run about one budget a turn (issue #38 item 7).
   */
  shared?: TurnClock;
  /**
   * How long a batch of lingering units only (UnitOptions.linger) waits for announced writes;
   * the hold (holdMs) when absent or shorter.
   */
  lingerMs?: number;
  /**
   * The WAL's fsync off the event loop (wal-sync.ts): a flush commits without syncing and its units
   * settle once a sync of the WAL started after the commit has returned. Without it (an in-memory
   * database, the CLI) every COMMIT syncs on this thread (`synchronous = FULL`).
   */
  walSync?: WalSync;
}

/** What a flush asks of the turn's shared clock: its budget left, negative once spent (TurnTime.left). */
export interface TurnClock {
  left(): number;
}

/**
 * What the units of one transaction add up and write once, before its COMMIT (GroupCommit.gathered):
 * `open` makes the transaction's tally at the first unit that asks, `seal` writes it after the
 * transaction's last unit (intake's stored bytes: one upsert per client per commit, not per row).
 */
export interface Gatherer<T> {
  open(): T;
  seal(tx: Tx, tally: T): void;
}

/** A write queued after its store closed. */
export class StoreClosedError extends Error {
  override readonly name = "StoreClosedError";
  constructor() {
    super("The store is closed.");
  }
}

/**
 * Group commit: writes queued in the same turn of the event loop share one transaction, so one
 * fsync makes a whole batch durable instead of one per request. Each unit of work runs in its own
 * savepoint: one that throws (a 409, say) is rolled back alone and rejects alone. Every promise
 * settles only after the outer COMMIT, so a caller never answers before its row is on disk. One
 * turn runs units for at most TURN_BUDGET_MS (past its first MIN_UNITS_PER_TURN): a longer batch
 * commits in parts, a turn each, in order.
 */
export class GroupCommit {
  private queue: Pending<unknown>[] = [];
  private scheduled = false;
  private closed = false;
  /** The batch being filled (a turn scheduled for an earlier one that committed full does nothing). */
  private batchNo = 0;
  /** The queue's length at the last turn this batch waited, and how many turns it has waited. */
  private seen = 0;
  private waited = 0;
  /** Writes announced and not yet queued (expect()): a batch waits for them up to holdMs. */
  private expected = 0;
  /** When the open batch stops waiting for announced writes (performance.now()), and its timer. */
  private holdUntil = 0;
  /** When the open batch's first unit was queued (performance.now()), and whether all its units linger. */
  private batchAt = 0;
  private lingering = false;
  private holdTimer: NodeJS.Timeout | null = null;
  /** Work that joins the open batch as it closes (beforeCommit). */
  private closing: Array<() => void> = [];
  /** The open transaction's tallies (gathered()), null outside a flush's transaction. */
  private tallies: Map<Gatherer<unknown>, unknown> | null = null;

  /**
   * `fillTurns`: a batch waits up to this many more turns of the event loop while rows keep arriving
   * (the queue grew during the last turn), so a commit carries the requests of every connection the
   * previous commit answered rather than half of them (intake at 32 connections: about 16 rows a
   * commit without waiting, 29 with 2 turns; a turn when nothing arrives costs microseconds).
   */
  constructor(
    private readonly db: Db,
    private readonly maxBatch = 256,
    private readonly fillTurns = 0,
    /**
     * How long a batch may wait for writes announced by expect() (0: it never waits). Attempts on the
     * wire announce their records: the records of attempts settling within a few ms then share one
     * transaction and one fsync, with the claims they ask for, instead of one commit per settle.
     */
    private readonly holdMs = 0,
    /**
     * The work one turn may do: once a flush has run at least `minUnits` units and for `budgetMs`,
     * it commits them (they settle then) and runs the rest in a later turn, ahead of what was
     * queued since, so other requests are served in between.
     */
    bound: TurnBound = {},
  ) {
    this.turnBudgetMs = bound.budgetMs ?? TURN_BUDGET_MS;
    this.minUnits = Math.max(1, bound.minUnits ?? MIN_UNITS_PER_TURN);
    this.now = bound.now ?? (() => performance.now());
    this.shared = bound.shared;
    this.walSync = bound.walSync;
    this.settles = new PacedSettles(
      Math.max(1, bound.settlesPerTurn ?? SETTLES_PER_TURN),
      bound.settleBudgetMs ?? SETTLE_BUDGET_MS,
      this.now,
    );
    this.lingerMs = Math.max(holdMs, bound.lingerMs ?? 0);
  }

  private readonly lingerMs: number;

  /** Committed units' settles, paced a turn at a time (paced-settles.ts). */
  private readonly settles: PacedSettles;

  private readonly walSync: WalSync | undefined;

  private readonly shared: TurnClock | undefined;

  private readonly turnBudgetMs: number;
  private readonly minUnits: number;
  private readonly now: () => number;

  /**
   * Announces a write on its way (an attempt on the wire, its record to come): the open batch waits
   * for it, at most holdMs from its first write. Returns what to call once it is queued, or will not
   * be (idempotent); the last of them closes a waiting batch at once.
   */
  expect(): () => void {
    if (this.holdMs <= 0) return () => {};
    this.expected++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.expected--;
      if (this.expected === 0 && this.holdTimer) {
        clearTimeout(this.holdTimer);
        this.holdTimer = null;
        const batchNo = this.batchNo;
        // A turn later: the write announced is queued right after this call.
        setImmediate(() => this.turn(batchNo));
      }
    };
  }

  /**
   * The open batch stops waiting for announced writes and commits at the next turn (a caller that
   * queued enough into it: the attempts' records at RECORDS_PER_COMMIT). Nothing when no batch waits.
   */
  closeSoon(): void {
    if (!this.scheduled) return;
    this.lingering = false;
    this.holdAtMost(0);
  }

  /**
   * A lingering unit of the open batch took one more write (an attempt's record): while every unit
   * of the batch lingers, it waits for more up to lingerMs from its first write (or until no write
   * is announced, closeSoon, or what waits on it hurries). So records of attempts on the wire fill
   * one commit, and a lone one waits no longer than a hold. Records arrive in bursts a few ms apart
   * (the answers of a turn's sends): a batch that waited only holdMs after the last one closed in
   * the gaps between them, with about 8 records (docs/performance.md, delivery's twelfth round).
   */
  lingerOn(): void {
    if (!this.scheduled || !this.lingering) return;
    // A timer already set for an earlier end runs turn(), which waits out the rest.
    this.holdUntil = Math.max(this.holdUntil, this.batchAt + this.lingerMs);
  }

  /** The open batch waits for announced writes until `until` at the latest (performance.now()). */
  private holdAtMost(until: number): void {
    if (until >= this.holdUntil) return;
    this.holdUntil = until;
    if (!this.holdTimer) return;
    // The timer set for the later end: a turn now waits what is left, or commits.
    clearTimeout(this.holdTimer);
    this.holdTimer = null;
    const batchNo = this.batchNo;
    setImmediate(() => this.turn(batchNo));
  }

  /**
   * Runs `join` as the open batch closes, before its transaction, so what it queues shares the
   * batch's commit (the refills' claim for the slots its records freed). False when no batch is open.
   * What joins is a claim someone waits on: the batch lingers no longer than a hold, unless
   * `linger` says it may wait (a refill of keys that still have leased-ahead events to start:
   * hurry() ends the wait once it no longer may).
   */
  beforeCommit(join: () => void, options?: { linger?: boolean }): boolean {
    if (!this.scheduled) return false;
    this.closing.push(join);
    if (options?.linger !== true) this.hurry();
    return true;
  }

  /**
   * What waits on the open batch cannot wait for its linger any more (a refill joined with linger
   * whose keys ran out of events to start): it commits a hold after its first write at the latest,
   * as if a unit without linger had been queued into it. Nothing when no batch is open.
   */
  hurry(): void {
    if (!this.scheduled) return;
    this.lingering = false;
    this.holdAtMost(this.batchAt + this.holdMs);
  }

  /**
   * From inside a unit: the open transaction's tally of `gatherer`, opened at the first unit that
   * asks; its seal runs once after the transaction's last unit and before its COMMIT, so what it
   * writes commits with the units (a flush cut by its budget seals the part it ran). A transaction
   * that fails drops its tallies unsealed, as it drops the units' writes.
   */
  gathered<T>(gatherer: Gatherer<T>): T {
    const tallies = this.tallies;
    if (!tallies) throw new Error("GroupCommit.gathered: called outside a unit of this commit");
    if (tallies.has(gatherer)) return tallies.get(gatherer) as T;
    const tally = gatherer.open();
    tallies.set(gatherer, tally);
    return tally;
  }

  run<T>(work: (tx: Tx) => T, options?: UnitOptions): Promise<T> {
    return this.enqueue(work, false, options);
  }

  /**
   * As run(), for a unit that is atomic by itself: it throws before it writes, writes one statement,
   * or opens its own savepoint around several. A savepoint costs as much as a small insert.
   */
  runAtomic<T>(work: (tx: Tx) => T, options?: UnitOptions): Promise<T> {
    return this.enqueue(work, true, options);
  }

  /**
   * Commits what is queued now, then refuses more: the store calls it before it closes the
   * database, so no write queued before close() is lost or left to fail on a closed connection.
   */
  close(): void {
    this.flush(Number.POSITIVE_INFINITY);
    // Units of earlier commits still waiting for their sync settle now, before the database closes.
    this.walSync?.drain();
    this.settles.drain();
    this.closed = true;
  }

  private enqueue<T>(work: (tx: Tx) => T, atomic: boolean, options: UnitOptions | undefined): Promise<T> {
    if (this.closed) return Promise.reject(new StoreClosedError());
    const withPrevious = options?.withPrevious === true;
    const linger = options?.linger === true;
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, atomic, withPrevious, resolve, reject } as Pending<unknown>);
      if (this.queue.length >= this.maxBatch) this.flush(this.turnBudgetMs);
      else if (!this.scheduled) {
        this.scheduled = true;
        this.seen = 0;
        this.waited = 0;
        this.batchAt = performance.now();
        this.holdUntil = this.batchAt + this.holdMs;
        this.lingering = linger;
        const batchNo = ++this.batchNo;
        setImmediate(() => this.turn(batchNo));
      } else if (linger) this.lingerOn();
      else this.hurry();
    });
  }

  /** At the end of a turn: one more turn while rows are still arriving (at most fillTurns), else the commit. */
  private turn(batchNo: number): void {
    // A full batch or close() committed it meanwhile.
    if (!this.scheduled || batchNo !== this.batchNo) return;
    if (this.waited < this.fillTurns && this.queue.length > this.seen) {
      this.seen = this.queue.length;
      this.waited++;
      setImmediate(() => this.turn(batchNo));
      return;
    }
    const wait = this.holdUntil - performance.now();
    if (this.expected > 0 && wait > 0) {
      if (!this.holdTimer) {
        this.holdTimer = setTimeout(() => {
          this.holdTimer = null;
          this.turn(batchNo);
        }, Math.ceil(wait));
      }
      return;
    }
    this.flush(this.turnBudgetMs);
  }

  /**
   * Runs the queued units in one transaction, for at most `budgetMs` (then commits what ran and
   * leaves the rest at the head of the queue for the next turn: order, savepoints and "settled only
   * after its commit" hold across the cut).
   */
  private flush(budgetMs: number): void {
    if (this.holdTimer) {
      clearTimeout(this.holdTimer);
      this.holdTimer = null;
    }
    // What joins the batch as it closes queues into it now (scheduled still set: no turn of its own).
    if (this.closing.length > 0) {
      const joining = this.closing;
      this.closing = [];
      this.scheduled = true;
      for (const join of joining) join();
    }
    this.scheduled = false;
    const queued = this.queue;
    this.queue = [];
    if (queued.length === 0) return;
    const started = this.now();
    if (this.shared) budgetMs = Math.min(budgetMs, this.shared.left());
    let batch = queued;
    const outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> = [];
    const sqlite = clientOf(this.db);
    // close() commits with its own sync: the database closes right after.
    const walSync = budgetMs === Number.POSITIVE_INFINITY ? undefined : this.walSync;
    try {
      // exec, not pragma(): no Statement object nor result rows (0.8 µs CPU a switch against 4.2,
      // bench/pragma-switch.mjs); PRAGMA synchronous takes effect as it is compiled, so it is never prepared once.
      if (walSync) sqlite.exec(SYNC_NORMAL);
      // IMMEDIATE: take the write lock up front (waiting out busy_timeout), rather than failing
      // when a read-first transaction must upgrade while another process writes.
      this.db.transaction(
        (tx) => {
          const tallies = new Map<Gatherer<unknown>, unknown>();
          this.tallies = tallies;
          for (const [i, item] of queued.entries()) {
            if (i >= this.minUnits && !item.withPrevious && this.now() - started >= budgetMs) {
              batch = queued.slice(0, i);
              break;
            }
            try {
              outcomes.push({
                ok: true,
                value: item.atomic ? item.work(tx) : inSavepoint(sqlite, () => item.work(tx)),
              });
            } catch (error) {
              // Some errors (disk full, I/O) roll back the whole transaction, not just the savepoint:
              // then nothing before is durable either, and the batch must fail as one.
              if (!sqlite.inTransaction) throw error;
              outcomes.push({ ok: false, error });
            }
          }
          if (!sqlite.inTransaction) throw new Error("transaction ended early");
          this.tallies = null;
          for (const [gatherer, tally] of tallies) gatherer.seal(tx, tally);
        },
        { behavior: "immediate" },
      );
    } catch (error) {
      this.tallies = null;
      // A closed connection failed the flush: nothing to restore, and the units still reject.
      if (walSync && sqlite.open) sqlite.exec(SYNC_FULL);
      // The commit itself failed (disk full, I/O error): nothing in the batch is durable.
      for (const item of batch) item.reject(error);
      this.carryOver(queued.slice(batch.length));
      return;
    }
    if (walSync) sqlite.exec(SYNC_FULL);
    this.carryOver(queued.slice(batch.length));
    const settle = (syncError: Error | null) =>
      this.settles.add(
        batch.map((item, i) => () => {
          const outcome = outcomes[i]!;
          // Committed but not known to be on disk: as a COMMIT whose fsync failed, the unit fails.
          if (syncError !== null) item.reject(syncError);
          else if (outcome.ok) item.resolve(outcome.value);
          else item.reject(outcome.error);
        }),
      );
    if (walSync) walSync.afterSync(settle);
    else settle(null);
  }

  /** The units a flush left over its budget: first in the queue, committed in a turn of their own. */
  private carryOver(rest: Pending<unknown>[]): void {
    if (rest.length === 0) return;
    this.queue = rest.concat(this.queue);
    // A fresh batch number: a turn already scheduled for units queued meanwhile does nothing, this one takes them all.
    this.scheduled = true;
    this.seen = 0;
    this.waited = 0;
    const batchNo = ++this.batchNo;
    setImmediate(() => {
      if (this.scheduled && batchNo === this.batchNo) this.flush(this.turnBudgetMs);
    });
  }
}

/**
 * A sweep over many rows as units of `commits`, at most `chunk` rows a unit, until a unit does
 * fewer than it was given or `limit` rows are done. Each unit commits in a turn of its own (the
 * next is queued only once it settles), so no turn deletes thousands of rows at once. A caller's
 * `limit` is checked as the row limit it stands for (the store's value rules: a non-integer is
 * refused as on PostgreSQL, where it is bound); "all" is the sweep's own "no limit".
 */
export async function sweepInChunks(
  commits: Pick<GroupCommit, "run">,
  limit: number | "all",
  chunk: number,
  unit: (tx: Tx, rows: number) => number,
): Promise<number> {
  const max = limit === "all" ? Number.POSITIVE_INFINITY : checkNumber(limit, "limit");
  let done = 0;
  while (done < max) {
    const rows = Math.min(chunk, max - done);
    const swept = await commits.run((tx) => unit(tx, rows));
    done += swept;
    if (swept < rows) break;
  }
  return done;
}

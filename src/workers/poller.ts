import { linkingTasks } from "./list-sweep.js";
import type { InFlightTask } from "../store/store.js";
import type { TaskRow } from "../store/rows.js";
import {
  afterHarvest,
  costOfAll,
  DUE_QUANTILE,
  endedCandidates,
  isDue,
  newListState,
  nextTickAt,
  oldestOfEachKind,
  planSingles,
  planSweep,
  probeOutcome,
  QUIET_FULL_MS,
  sweepFailed,
  sweepOutcome,
  sweepReadCap,
  sweepShare,
  worthHarvesting,
  type ListState,
  type PaceBudget,
  type PollStrategy,
  type SinglesStep,
  type SweepKind,
  type SweepOutcome,
  type SweepResult,
} from "../core/poll-plan.js";
import { UpstreamError } from "../upstream/errors.js";
import type { UpstreamTask } from "../upstream/types.js";
import { harvestTerminal, probeList, sweepActive, sweepAll } from "./list-sweep.js";
import { LEADER_RECHECK_MS } from "./leadership.js";
import type { TickResult } from "./loop.js";
import { EarlyRecords } from "./poll/early-records.js";
import type { PollerOptions } from "./poll/ports.js";
import { SingleReads } from "./poll/single-reads.js";

/** A claim outlasts the upstream read it covers. */
const LEASE_MARGIN_MS = 5_000;
/** Observations a sweep records at once. */
const RECORD_CONCURRENCY = 8;

/**
 * Watches submitted tasks within each account's read budget. With several tasks in flight it
 * sweeps the list endpoint (a hundred tasks a read) and spends single reads only where they pay:
 * tasks that just ended without their output, or accounts whose list body cannot be understood.
 * Every read passes ReadBudget.take(), so the budget holds however many tasks are in flight.
 */
export class Poller {
  private readonly singles: SingleReads;
  private readonly lists = new Map<string, ListState>();
  /** Per account: relay task ids a sweep found ended, whose result a single read must fetch. */
  private readonly needsRead = new Map<string, Set<string>>();
  private readonly strategy: PollStrategy;

  constructor(private readonly opts: PollerOptions) {
    this.strategy = opts.strategy ?? "adaptive";
    this.singles = new SingleReads(opts, this.strategy);
  }

  /** The poller's clock (EarlyRecords records at its time). */
  now(): number {
    return this.opts.clock.now();
  }

  /** Records a sweep's settled tasks of `account` as its pages come (EarlyRecords). */
  private earlyRecords(account: string, inFlight: readonly InFlightTask[]): EarlyRecords {
    return new EarlyRecords(
      (ids, seen, now) => this.record(account, ids, seen, now, now),
      () => this.now(),
      inFlight,
    );
  }

  private leaseMs(): number {
    return this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS;
  }

  private listState(account: string): ListState {
    let state = this.lists.get(account);
    if (!state) this.lists.set(account, (state = newListState()));
    return state;
  }

  async runOnce(): Promise<TickResult> {
    const { tasks, clock } = this.opts;
    // Planned once per cluster: an instance that leads no account reads nothing of the tasks; a takeover wakes it.
    if (!(await this.opts.leadership.plans())) return { didWork: false, nextDueAt: null };
    let didWork = false;
    let wake: number | null = null;
    const later = (at: number) => {
      wake = wake === null ? at : Math.min(wake, at);
    };
    for (const account of await tasks.accountsInFlight()) {
      if (await this.pollAccount(account, later)) didWork = true;
    }
    const due = await tasks.nextDueAt("submitted", clock.now());
    return { didWork, nextDueAt: nextTickAt(due, wake, clock.now()) };
  }

  /**
   * One account's part of a tick: a sweep of its list when one is due (see planSweep), then the
   * single reads planSingles picks. `later` is told when the account wants the next tick.
   */
  private async pollAccount(account: string, later: (at: number) => void): Promise<boolean> {
    const { tasks, clock, budget } = this.opts;
    // One poller per account across instances sharing the store (always this one on SQLite).
    if (!(await this.opts.leadership.leads(account))) {
      later(clock.now() + LEADER_RECHECK_MS);
      return false;
    }
    await budget.load(account);
    if (budget.available(account) <= 0) {
      later(budget.nextAvailableAt(account));
      return false;
    }
    let didWork = false;
    const state = this.listState(account);
    let running = await tasks.countRunning(account);
    const step = planSweep(
      { strategy: this.strategy, running, now: clock.now(), state },
      { available: budget.available(account), perMinute: budget.perMinute },
    );
    if (step.kind === "probe") {
      await this.probe(account, state);
      didWork = true;
    } else if (step.kind === "sweep") {
      state.fullRunning = running;
      await this.sweep(account, state, step.sweep);
      didWork = true;
      // Tasks the sweep saw end no longer run: the count decides whether sweeps still cover the account.
      running = await tasks.countRunning(account);
    } else if (step.kind === "wait") {
      later(budget.nextAvailableAt(account, step.reads));
    }
    if (step.kind !== "skip" && state.nextSweepAt > clock.now()) later(state.nextSweepAt);
    const singles = planSingles(
      { strategy: this.strategy, running, now: clock.now(), state },
      budget.available(account),
      this.needsRead.get(account) ?? [],
    );
    if (singles.kind === "wait") {
      later(budget.nextAvailableAt(account));
      return didWork;
    }
    const claimed = await this.claimSingles(account, singles);
    if (claimed.length > 0) didWork = true;
    for (const task of claimed)
      this.opts.metrics?.workerLag.observe(
        { worker: "poller" },
        Math.max(0, clock.now() - (task.nextRunAt ?? clock.now())) / 1000,
      );
    await Promise.all(claimed.map((task) => this.singles.readOne(task)));
    return didWork;
  }

  /** Claims what planSingles chose: tasks due now, or the flagged ones (no longer flagged once taken). */
  private async claimSingles(account: string, step: Exclude<SinglesStep, { kind: "wait" }>): Promise<TaskRow[]> {
    const { tasks, clock } = this.opts;
    const lease = {
      now: clock.now(),
      leaseMs: this.leaseMs(),
      token: this.opts.owner.token(),
      fence: this.opts.leadership.fence(account),
    };
    if (step.kind === "due") return tasks.claimDue("submitted", account, { ...lease, limit: step.limit });
    if (step.ids.length === 0) return [];
    const flagged = this.needsRead.get(account);
    for (const id of step.ids) flagged?.delete(id);
    return tasks.claimIds(step.ids, "submitted", lease);
  }

  /** Whether some kind (type and model) in flight has run long enough to start finishing; durations are asked kind by kind, until one is. */
  private async anyDue(inFlight: InFlightTask[], now: number): Promise<boolean> {
    for (const task of oldestOfEachKind(inFlight, now)) {
      if (isDue(task, await this.opts.durations.quantile(task.type, task.model, DUE_QUANTILE), now)) return true;
    }
    return false;
  }

  /** The pacing view of the account's read budget. */
  private pace(account: string): PaceBudget {
    const { budget } = this.opts;
    return {
      windowMs: budget.windowMs,
      perMinute: budget.perMinute,
      readsInLast: (ms) => budget.readsInLast(account, ms),
    };
  }

  /**
   * A probe while the account is quiet (planSweep): one page of the list. What it settled is
   * recorded; anything it shows changed ends the quiet spell, and the full sweep runs at once.
   */
  private async probe(account: string, state: ListState): Promise<void> {
    const { tasks, clock, budget, logger, metrics } = this.opts;
    const inFlight = await tasks.listInFlight(account);
    if (inFlight.length === 0) return;
    const early = this.earlyRecords(account, inFlight);
    try {
      const client = linkingTasks(await this.opts.accounts.get(account), inFlight);
      const result = await probeList(
        client,
        state.tailCursor,
        () => budget.take(account),
        (items) => early.page(items),
      );
      metrics?.upstreamCalls.inc(
        { endpoint: "list", outcome: result.unsupported ? "unrecognised" : "ok" },
        result.reads,
      );
      await early.settled();
      if (result.unsupported) {
        state.quiet = false;
        return;
      }
      const now = clock.now();
      const probed = probeOutcome(inFlight, result.seen, now, this.pace(account), state.passMs);
      await this.record(
        account,
        probed.changed.filter((id) => !early.has(id)),
        (row) => result.seen.get(row.upstreamTaskId!)!,
        // Read again by the next full sweep, at the latest QUIET_FULL_MS on.
        now + QUIET_FULL_MS + 5_000,
        now,
      );
      state.nextSweepAt = probed.nextSweepAt;
      if (probed.ended) state.quiet = false;
    } catch (err) {
      await early.settled().catch(() => {});
      const e = err instanceof UpstreamError ? err : null;
      metrics?.upstreamCalls.inc({ endpoint: "list", outcome: e?.code ?? "error" });
      const failed = sweepFailed(e, clock.now());
      if (failed.pauseUntil !== null) await budget.pause(account, failed.pauseUntil);
      // The full sweep decides what the list is worth next; a cursor kept from an earlier sweep
      // may be what the upstream refused.
      state.quiet = false;
      state.tailCursor = null;
      state.nextSweepAt = failed.nextSweepAt;
      logger.warn({ account, code: e?.code ?? String(err) }, "upstream list probe failed");
    }
  }

  /**
   * One sweep of an account: the lists its kind reads (for an active sweep, the terminal lists too
   * when enough tasks ended), then what sweepOutcome makes of them. Only tasks whose state changed
   * are claimed and written; unchanged ones cost nothing.
   */
  private async sweep(account: string, state: ListState, kind: SweepKind): Promise<void> {
    const { tasks, clock, budget, logger, metrics } = this.opts;
    const startedAt = clock.now();
    const inFlight = await tasks.listInFlight(account);
    if (inFlight.length === 0) return;
    const share = sweepShare(await this.anyDue(inFlight, startedAt), this.needsRead.get(account)?.size ?? 0);
    const take = () => budget.take(account);
    const maxReads = sweepReadCap(budget.available(account), share);
    const early = this.earlyRecords(account, inFlight);
    try {
      const client = linkingTasks(await this.opts.accounts.get(account), inFlight);
      let result: SweepResult;
      let candidates: ReadonlySet<string> = new Set<string>();
      const onPage = (items: UpstreamTask[]) => early.page(items);
      if (kind === "all") {
        const wanted = new Set(inFlight.flatMap((t) => (t.upstreamTaskId ? [t.upstreamTaskId] : [])));
        result = await sweepAll(client, wanted, maxReads, take, onPage);
        state.cost.all = costOfAll(state.cost.all, result, maxReads);
        if (result.complete) state.tailCursor = result.tailCursor ?? null;
      } else {
        result = await sweepActive(
          client,
          { includeQueued: inFlight.some((t) => t.status === "queued"), maxReads },
          take,
          onPage,
        );
        candidates = endedCandidates(inFlight, result, startedAt);
        if (worthHarvesting(result, candidates, state)) {
          await harvestTerminal(client, candidates, maxReads - result.reads, take, result, onPage);
          const harvested = afterHarvest(state, result, candidates, maxReads);
          state.cost.active = harvested.active;
          state.harvestUseful = harvested.harvestUseful;
          candidates = harvested.unseen;
        }
      }
      metrics?.upstreamCalls.inc(
        { endpoint: "list", outcome: result.unsupported ? "unrecognised" : "ok" },
        result.reads,
      );
      const now = clock.now();
      await this.applySweep(
        account,
        state,
        sweepOutcome({
          inFlight,
          result,
          candidates,
          now,
          share,
          budget: this.pace(account),
          lastFullAt: state.lastFullAt,
        }),
        result,
        now,
        early,
      );
    } catch (err) {
      await early.settled().catch(() => {});
      const e = err instanceof UpstreamError ? err : null;
      metrics?.upstreamCalls.inc({ endpoint: "list", outcome: e?.code ?? "error" });
      const failed = sweepFailed(e, clock.now());
      if (failed.unsupportedUntil !== null) state.unsupportedUntil = failed.unsupportedUntil;
      if (failed.pauseUntil !== null) await budget.pause(account, failed.pauseUntil);
      state.nextSweepAt = failed.nextSweepAt;
      logger.warn({ account, code: e?.code ?? String(err) }, "upstream list sweep failed");
    }
  }

  /** Carries out what a sweep found: the list state for the next one, flags for single reads, the changed tasks recorded. */
  private async applySweep(
    account: string,
    state: ListState,
    outcome: SweepOutcome,
    result: SweepResult,
    now: number,
    early: EarlyRecords,
  ): Promise<void> {
    const { logger, metrics } = this.opts;
    if (outcome.kind === "unsupported") {
      await early.settled();
      state.unsupportedUntil = outcome.unsupportedUntil;
      if (!state.warned)
        logger.warn({ account }, "upstream task list body not understood; falling back to single reads");
      state.warned = true;
      return;
    }
    state.nextSweepAt = outcome.nextSweepAt;
    state.lastEnded = outcome.ended;
    state.quiet = outcome.quiet;
    state.passMs = outcome.passMs;
    state.lastFullAt = now;
    let flagged = this.needsRead.get(account);
    if (!flagged) this.needsRead.set(account, (flagged = new Set()));
    for (const id of outcome.flag) flagged.add(id);
    // What the pages settled was recorded as each page came (EarlyRecords); the rest now.
    await Promise.all([
      early.settled(),
      this.record(
        account,
        outcome.changed.filter((id) => !early.has(id)),
        (row) => result.seen.get(row.upstreamTaskId!)!,
        outcome.coveredUntil,
        now,
      ),
    ]);
    if (outcome.covered > result.reads) metrics?.readsSaved.inc(outcome.covered - result.reads);
  }

  /**
   * Claims the tasks and records what a sweep saw of each, a few at a time (each is its own
   * transaction: one after the other, the last of a sweep that ended many waited for all of them).
   */
  async record(
    account: string,
    ids: string[],
    seen: (row: TaskRow) => UpstreamTask,
    nextRunAt: number,
    now: number,
  ): Promise<void> {
    if (ids.length === 0) return;
    const token = this.opts.owner.token();
    const rows = await this.opts.tasks.claimIds(ids, "submitted", {
      now,
      leaseMs: this.leaseMs(),
      token,
      fence: this.opts.leadership.fence(account),
    });
    let next = 0;
    const worker = async () => {
      while (next < rows.length) {
        const row = rows[next++]!;
        await this.opts.lifecycle.recordObservation(row, token, seen(row), nextRunAt, false);
      }
    };
    await Promise.all(Array.from({ length: Math.min(RECORD_CONCURRENCY, rows.length) }, worker));
  }
}

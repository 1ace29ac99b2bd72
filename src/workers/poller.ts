import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { Metrics } from "../metrics.js";
import type { InFlightTask, Store, TaskRow } from "../store/store.js";
import type { Lifecycle } from "../core/lifecycle.js";
import { TERMINAL_STATUSES } from "../core/transition.js";
import type { Nudges } from "../services/deps.js";
import type { UpstreamAccounts } from "../services/upstream-accounts.js";
import { UpstreamError } from "../upstream/errors.js";
import { LEADER_RECHECK_MS } from "./submitter.js";
import { DurationStats } from "./duration-stats.js";
import { finishedCandidates, harvestTerminal, sweepActive, sweepAll, type SweepResult } from "./list-sweep.js";
import { Leadership } from "./leadership.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";
import { nextPollDelay } from "./poll-schedule.js";
import type { ReadBudget } from "./read-budget.js";

export type PollStrategy = "adaptive" | "round-robin";

export interface PollerOptions {
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  accounts: UpstreamAccounts;
  budget: ReadBudget;
  owner: LeaseOwner;
  nudges: Nudges;
  lifecycle: Lifecycle;
  /** Which accounts this instance leads (shared with the submitter); one is made when absent. */
  leadership?: Leadership;
  /** Learned durations (shared with the lifecycle, which records them); one is made when absent. */
  durations?: DurationStats;
  metrics?: Metrics | undefined;
  /**
   * adaptive (default): list sweeps for many in-flight tasks, single reads timed by learned durations.
   * round-robin: one single read per task in turn — the naive baseline the benchmarks compare against.
   */
  strategy?: PollStrategy;
}

/** A claim outlasts the upstream read it covers. */
const LEASE_MARGIN_MS = 5_000;
/**
 * A submitted task is declared lost only after JSON `404 task_not_found` answers spanning this long
 * with no good read between: the upstream may have charged it, so a glitch (an HTML 404 from a
 * proxy, a deploy) must never write it off.
 */
export const LOST_AFTER_MS = 10 * 60_000;
/** Below this many tasks in flight, single reads cost no more than a sweep. */
const SWEEP_MIN_TASKS = 3;
/**
 * Share of the read budget sweeps may use. While some task in flight is past the point where its
 * kind starts finishing, the whole budget (less a quarter when single reads wait) goes to sweeps:
 * unused reads are latency given away. Before that point sweeps slow down to keep reads per task low.
 */
const SWEEP_SHARE_DUE = 1;
const SWEEP_SHARE_WITH_SINGLES = 0.75;
const SWEEP_SHARE_IDLE = 0.5;
/** A task is due once it has run as long as the shortest tenth of its kind (type and model) took. */
const DUE_QUANTILE = 0.1;
const MIN_SWEEP_INTERVAL_MS = 1_000;
const MAX_SWEEP_INTERVAL_MS = 60_000;
/** Finished candidates worth reading the terminal lists for (fewer: single reads). */
const HARVEST_MIN = 3;
/** After an unreadable list body, single reads only for this long, then the list is tried again. */
const LIST_RETRY_MS = 30 * 60_000;
const SINGLE_BATCH = 25;

/**
 * active: the queued and processing lists, a task absent from both has ended; then the terminal
 * lists for the output of what ended. all: the unfiltered list down to the last task in flight,
 * ended ones with their output. Which costs fewer reads depends on the upstream's list order and on
 * how many tasks end between sweeps, so the poller measures both and uses the cheaper.
 */
type SweepKind = "active" | "all";

interface ListState {
  nextSweepAt: number;
  /**
   * Reads the last complete sweep of each kind took: `active` counts only sweeps that read terminal
   * lists (without them it is always the cheaper); null: not measured; Infinity: the unfiltered list
   * does not show every task of ours, so that kind is out.
   */
  cost: Record<SweepKind, number | null>;
  /** Tasks of ours the last sweep found ended. */
  lastEnded: number;
  unsupportedUntil: number;
  /** null until a terminal list was read; false when its items came without output (harvest pointless). */
  harvestUseful: boolean | null;
  warned: boolean;
}

/**
 * Watches submitted tasks within each account's read budget. With several tasks in flight it
 * sweeps the list endpoint (a hundred tasks a read) and spends single reads only where they pay:
 * tasks that just ended without their output, or accounts whose list body cannot be understood.
 * Every read passes ReadBudget.take(), so the budget holds however many tasks are in flight.
 */
export class Poller {
  readonly durations: DurationStats;
  /** Per task: when the current run of JSON 404 task_not_found answers began. */
  private readonly notFound = new Map<string, number>();
  private readonly lists = new Map<string, ListState>();
  /** Per account: relay task ids a sweep found ended, whose result a single read must fetch. */
  private readonly needsRead = new Map<string, Set<string>>();
  private readonly strategy: PollStrategy;
  private readonly leadership: Leadership;

  constructor(private readonly opts: PollerOptions) {
    this.durations = opts.durations ?? new DurationStats(opts.store, opts.clock);
    this.leadership = opts.leadership ?? new Leadership(opts.store, opts.logger);
    this.strategy = opts.strategy ?? "adaptive";
  }

  private leaseMs(): number {
    return this.opts.config.upstreamTimeoutMs + LEASE_MARGIN_MS;
  }

  private listState(account: string): ListState {
    let state = this.lists.get(account);
    if (!state) {
      state = { nextSweepAt: 0, cost: { active: null, all: null }, lastEnded: 0, unsupportedUntil: 0, harvestUseful: null, warned: false };
      this.lists.set(account, state);
    }
    return state;
  }

  async runOnce(): Promise<TickResult> {
    const { store, clock, budget } = this.opts;
    let didWork = false;
    let wake: number | null = null;
    const later = (at: number) => {
      wake = wake === null ? at : Math.min(wake, at);
    };
    for (const account of await store.tasks.accountsInFlight()) {
      // One poller per account across instances sharing the store (always this one on SQLite).
      if (!(await this.leadership.leads(account))) {
        later(clock.now() + LEADER_RECHECK_MS);
        continue;
      }
      await budget.load(account);
      if (budget.available(account) <= 0) {
        later(budget.nextAvailableAt(account));
        continue;
      }
      let running = await store.tasks.countRunning(account);
      if (this.strategy === "adaptive" && running >= SWEEP_MIN_TASKS) {
        const state = this.listState(account);
        const now = clock.now();
        if (now >= state.unsupportedUntil) {
          if (now >= state.nextSweepAt) {
            const kind = this.sweepKind(state);
            // A sweep cut short by the budget tells less than one that waits for its reads.
            const need = Math.min(budget.perMinute, Math.max(2, state.cost[kind] ?? 2));
            if (budget.available(account) >= need) {
              await this.sweep(account, state, kind);
              didWork = true;
              // Tasks the sweep saw end no longer run: the count decides whether sweeps still cover the account.
              running = await store.tasks.countRunning(account);
            } else {
              later(budget.nextAvailableAt(account, need));
            }
          }
          if (state.nextSweepAt > clock.now()) later(state.nextSweepAt);
        }
      }
      const room = budget.available(account);
      if (room <= 0) {
        later(budget.nextAvailableAt(account));
        continue;
      }
      const claimed = await this.claimSingles(account, Math.min(room, SINGLE_BATCH), running);
      if (claimed.length > 0) didWork = true;
      for (const task of claimed) this.opts.metrics?.workerLag.observe({ worker: "poller" }, Math.max(0, clock.now() - (task.nextRunAt ?? clock.now())) / 1000);
      await Promise.all(claimed.map((task) => this.readOne(task)));
    }
    const due = await store.tasks.nextDueAt("submitted", clock.now());
    let next: number | null = due;
    if (wake !== null && (next === null || next <= clock.now() || wake < next)) next = wake;
    return { didWork, nextDueAt: next };
  }

  /**
   * Tasks to read one by one now. While sweeps cover an account, only the tasks a sweep found ended
   * (their output still to fetch); the others are left to the next sweep.
   */
  private async claimSingles(account: string, limit: number, running: number): Promise<TaskRow[]> {
    const { store, clock } = this.opts;
    const lease = { now: clock.now(), leaseMs: this.leaseMs(), token: this.opts.owner.token() };
    if (!this.sweeping(account, running)) return store.tasks.claimDue("submitted", account, { ...lease, limit });
    const flagged = this.needsRead.get(account);
    if (!flagged || flagged.size === 0) return [];
    const ids = [...flagged].slice(0, limit);
    for (const id of ids) flagged.delete(id);
    return store.tasks.claimIds(ids, "submitted", lease);
  }

  /**
   * While tasks are ending (the last sweep found enough of them to make an active sweep read the
   * terminal lists), the unfiltered list unless it measured dearer than an active sweep with its
   * harvest; otherwise the active lists alone, which then need no harvest.
   */
  private sweepKind(state: ListState): SweepKind {
    const { active, all } = state.cost;
    if (state.lastEnded < HARVEST_MIN || all === Infinity || active === null || state.harvestUseful === false) return "active";
    return all === null || all <= active ? "all" : "active";
  }

  /** How much of the budget sweeps may spend now (see SWEEP_SHARE_DUE). */
  private async sweepShare(account: string, inFlight: InFlightTask[], now: number): Promise<number> {
    // The oldest task of each kind (type and model) decides for the kind: one quantile per kind.
    const oldest = new Map<string, InFlightTask>();
    for (const task of inFlight) {
      const key = `${task.type}\u0000${task.model}`;
      const seen = oldest.get(key);
      if (!seen || (task.submittedAt ?? now) < (seen.submittedAt ?? now)) oldest.set(key, task);
    }
    let due = false;
    for (const task of oldest.values()) {
      const early = await this.durations.quantile(task.type, task.model, DUE_QUANTILE);
      // Nothing learned yet: every task counts as due (the first durations are learned this way).
      if (early === null || now - (task.submittedAt ?? now) >= early) {
        due = true;
        break;
      }
    }
    if (!due) return SWEEP_SHARE_IDLE;
    return (this.needsRead.get(account)?.size ?? 0) > 0 ? SWEEP_SHARE_WITH_SINGLES : SWEEP_SHARE_DUE;
  }

  private sweeping(account: string, running: number): boolean {
    if (this.strategy !== "adaptive") return false;
    const state = this.lists.get(account);
    return state !== undefined && state.nextSweepAt > 0 && this.opts.clock.now() >= state.unsupportedUntil && running >= SWEEP_MIN_TASKS;
  }

  /**
   * One sweep of an account: active lists, then terminal lists for what ended, then the changes
   * applied. Only tasks whose state changed are claimed and written; unchanged ones cost nothing.
   */
  private async sweep(account: string, state: ListState, kind: SweepKind): Promise<void> {
    const { store, clock, budget, logger, metrics } = this.opts;
    const startedAt = clock.now();
    const inFlight = await store.tasks.listInFlight(account);
    if (inFlight.length === 0) return;
    const share = await this.sweepShare(account, inFlight, startedAt);
    const take = () => budget.take(account);
    const maxReads = Math.max(2, Math.floor(budget.available(account) * share));
    try {
      const client = await this.opts.accounts.get(account);
      let result: SweepResult;
      let candidates = new Set<string>();
      if (kind === "all") {
        const wanted = new Set(inFlight.flatMap((t) => (t.upstreamTaskId ? [t.upstreamTaskId] : [])));
        result = await sweepAll(client, wanted, maxReads, take);
        // Every task seen: the cost is what it took. Short of reads: not measured. Otherwise the
        // list does not show every task of ours (an order we cannot follow): this kind is out.
        if (result.complete) state.cost.all = result.reads;
        else if (result.reads < maxReads && !result.unsupported) state.cost.all = Infinity;
      } else {
        result = await sweepActive(client, { includeQueued: inFlight.some((t) => t.status === "queued"), maxReads }, take);
        candidates = result.complete ? finishedCandidates(inFlight, result.seen, startedAt) : new Set<string>();
        if (!result.unsupported && candidates.size >= HARVEST_MIN && state.harvestUseful !== false) {
          await harvestTerminal(client, candidates, maxReads - result.reads, take, result);
          if (result.reads < maxReads) state.cost.active = result.reads;
          const found = [...candidates].map((id) => result.seen.get(id)).filter((t) => t?.status === "succeeded");
          if (found.length > 0) state.harvestUseful = found.some((t) => t!.output !== null && t!.output !== undefined);
          candidates = new Set([...candidates].filter((id) => !result.seen.has(id)));
        }
      }
      metrics?.upstreamCalls.inc({ endpoint: "list", outcome: result.unsupported ? "unrecognised" : "ok" }, result.reads);
      if (result.unsupported) {
        state.unsupportedUntil = clock.now() + LIST_RETRY_MS;
        if (!state.warned) logger.warn({ account }, "upstream task list body not understood; falling back to single reads");
        state.warned = true;
        return;
      }
      const now = clock.now();
      // Paced over the budget's own window (a minute and its safety second), so a sweep at full
      // share finds its reads free again when it is due.
      const interval = Math.min(MAX_SWEEP_INTERVAL_MS, Math.max(MIN_SWEEP_INTERVAL_MS, (result.reads * budget.windowMs) / (share * budget.perMinute)));
      state.nextSweepAt = now + interval;
      // Fallback read times if sweeping stops (fewer tasks in flight): well after the next sweep.
      const coveredUntil = now + 2 * interval + 5_000;
      let covered = 0;
      let ended = 0;
      const changed: string[] = [];
      let flagged = this.needsRead.get(account);
      if (!flagged) this.needsRead.set(account, (flagged = new Set()));
      for (const task of inFlight) {
        const remote = task.upstreamTaskId ? result.seen.get(task.upstreamTaskId) : undefined;
        const status = remote?.status ?? null;
        const terminal = status !== null && TERMINAL_STATUSES.has(status);
        // Ended with its output and a charge (or one read before): the list settles it. Without
        // either, one single read fetches what the list left out (DESIGN §15: never "free").
        const settled = terminal && !(status === "succeeded" && (remote!.output === null || remote!.output === undefined)) && remote!.usage.pointsCharged !== null;
        if (terminal || (task.upstreamTaskId && candidates.has(task.upstreamTaskId))) ended += 1;
        if (settled || (status !== null && !terminal)) {
          covered += 1;
          if (settled || status !== task.status) changed.push(task.id);
        } else if (task.upstreamTaskId && (candidates.has(task.upstreamTaskId) || remote)) {
          // Ended (or ended without its output in the list): one single read fetches the result.
          flagged.add(task.id);
        }
      }
      state.lastEnded = ended;
      const token = this.opts.owner.token();
      for (const row of await store.tasks.claimIds(changed, "submitted", { now, leaseMs: this.leaseMs(), token })) {
        await this.opts.lifecycle.recordObservation(row, token, result.seen.get(row.upstreamTaskId!)!, coveredUntil, false);
      }
      if (covered > result.reads) metrics?.readsSaved.inc(covered - result.reads);
    } catch (err) {
      const now = clock.now();
      const e = err instanceof UpstreamError ? err : null;
      metrics?.upstreamCalls.inc({ endpoint: "list", outcome: e?.code ?? "error" });
      // A page too large to read will not shrink: single reads only, as for a list body not understood.
      if (e?.code === "response_too_large") state.unsupportedUntil = now + LIST_RETRY_MS;
      if (e?.status === 429) await budget.pause(account, now + (e.retryAfterMs ?? 10_000));
      state.nextSweepAt = now + (e?.retryAfterMs ?? 5_000);
      logger.warn({ account, code: e?.code ?? String(err) }, "upstream list sweep failed");
    }
  }

  private async readOne(task: TaskRow): Promise<void> {
    const { clock, budget, logger, metrics, lifecycle } = this.opts;
    const token = task.claimToken!;
    if (!(await budget.take(task.upstreamAccount))) {
      await lifecycle.release(task, token);
      return;
    }
    try {
      const remote = await (await this.opts.accounts.get(task.upstreamAccount)).getTask(task.upstreamTaskId!);
      metrics?.upstreamCalls.inc({ endpoint: "read", outcome: "ok" });
      this.notFound.delete(task.id);
      const now = clock.now();
      const next = this.strategy === "round-robin" ? now : now + nextPollDelay(task.type, now - (task.submittedAt ?? task.createdAt), await this.durations.expected(task.type, task.model));
      await lifecycle.recordObservation(task, token, remote, next);
    } catch (err) {
      const now = clock.now();
      const e = err instanceof UpstreamError ? err : null;
      metrics?.upstreamCalls.inc({ endpoint: "read", outcome: e?.code ?? "error" });
      const log = { task_id: task.id, upstream_task_id: task.upstreamTaskId, account: task.upstreamAccount, code: e?.code ?? String(err) };
      if (e?.code === "response_too_large") {
        // The task's own answer is larger than UPSTREAM_MAX_BODY_BYTES: reading it again brings
        // the same body. The task ends; its reservation stands as its charge (DESIGN §15).
        await lifecycle.failUnusable(task, token, {
          code: "upstream_response_too_large",
          message: `${e.message}. The task may have been charged: check the upstream account.`,
          request_id: e.requestId,
        });
        logger.error(log, "upstream task answer larger than UPSTREAM_MAX_BODY_BYTES; ending the task failed");
        return;
      }
      if (e?.status === 429) {
        const until = now + (e.retryAfterMs ?? 10_000);
        await budget.pause(task.upstreamAccount, until);
        await lifecycle.retryLater(task, token, until);
        logger.warn({ ...log, retry_in_ms: until - now }, "upstream read limited; pausing reads for this account");
        return;
      }
      // Only the upstream's own JSON answer counts (an HTML or empty 404 from a proxy has no code).
      if (e?.status === 404 && e.code === "task_not_found") {
        const since = this.notFound.get(task.id) ?? now;
        this.notFound.set(task.id, since);
        if (now - since >= LOST_AFTER_MS) {
          this.notFound.delete(task.id);
          await lifecycle.fail(task, token, {
            code: "task_not_found",
            message: `The upstream answered 404 task_not_found for this task for ${Math.round((now - since) / 60_000)} minutes; it is taken as lost. It may have been charged: check the upstream account.`,
            request_id: e.requestId,
          });
          logger.warn(log, "upstream no longer knows the task; ending it failed");
          return;
        }
      }
      const delay = Math.min(60_000, 2_000 * 2 ** Math.min(task.pollCount, 5));
      await lifecycle.retryLater(task, token, now + delay, { pollCount: task.pollCount + 1 });
      logger.warn({ ...log, retry_in_ms: delay }, "upstream read failed");
    }
  }
}

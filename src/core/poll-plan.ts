import type { InFlightTask } from "../store/store.js";
import type { TaskRow } from "../store/rows.js";
import type { UpstreamError } from "../upstream/errors.js";
import type { UpstreamTask } from "../upstream/types.js";
import type { TaskError } from "./lifecycle.js";
import { nextPollDelay } from "./poll-schedule.js";
import { TERMINAL_STATUSES } from "./transition.js";
import { cappedBackoff } from "./backoff.js";

/**
 * The poller's decisions, as pure functions of what it has read (no store, no clock, no upstream):
 * whether to sweep an account's list or read tasks singly, how much of the read budget a sweep may
 * spend, what a sweep's pages and a single read's answer mean for each task, and when to look again.
 * src/workers/poller.ts gathers the inputs, calls these, and carries out what they return.
 */

export type PollStrategy = "adaptive" | "round-robin";

/**
 * A submitted task is declared lost only after JSON `404 task_not_found` answers spanning this long
 * with no good read between: the upstream may have charged it, so a glitch (an HTML 404 from a
 * proxy, a deploy) must never write it off.
 */
export const LOST_AFTER_MS = 10 * 60_000;
/** Below this many tasks in flight, single reads cost no more than a sweep. */
export const SWEEP_MIN_TASKS = 3;
/**
 * Share of the read budget sweeps may use. While some task in flight is past the point where its
 * kind starts finishing, the whole budget (less a quarter when single reads wait) goes to sweeps:
 * unused reads are latency given away. Before that point sweeps slow down to keep reads per task low.
 */
export const SWEEP_SHARE_DUE = 1;
export const SWEEP_SHARE_WITH_SINGLES = 0.75;
export const SWEEP_SHARE_IDLE = 0.5;
/** A task is due once it has run as long as the shortest tenth of its kind (type and model) took. */
export const DUE_QUANTILE = 0.1;
export const MIN_SWEEP_INTERVAL_MS = 1_000;
export const MAX_SWEEP_INTERVAL_MS = 60_000;
/**
 * While the account is quiet (its last full sweep found no task ended), a
 * probe, one page of the unfiltered list, stands in for the full sweep, every PROBE_READS reads'
 * worth of the budget's pace (1.8 s at 100 a minute); anything it shows changed brings the full
 * sweep at once. A full sweep still runs at least every QUIET_FULL_MS. While nothing ends, the
 * reads a full sweep would spend are kept for when tasks do (see sweepInterval).
 */
export const PROBE_READS = 3;
export const QUIET_FULL_MS = 15_000;
/** How much faster than the budget's steady pace sweeps may go on reads an earlier quiet spell left unspent. */
export const MAX_PACE_FACTOR = 3;
/** Finished candidates worth reading the terminal lists for (fewer: single reads). */
export const HARVEST_MIN = 3;
/** After an unreadable list body, single reads only for this long, then the list is tried again. */
export const LIST_RETRY_MS = 30 * 60_000;
export const SINGLE_BATCH = 25;

/**
 * active: the queued and processing lists, a task absent from both has ended; then the terminal
 * lists for the output of what ended. all: the unfiltered list down to the last task in flight,
 * ended ones with their output. Which costs fewer reads depends on the upstream's list order and on
 * how many tasks end between sweeps, so the poller measures both and uses the cheaper.
 */
export type SweepKind = "active" | "all";

/** What the poller knows of one account's list endpoint between ticks. */
export interface ListState {
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
  /** The last full sweep found no task ended: probes stand in for full sweeps (PROBE_READS). */
  quiet: boolean;
  /** When the last full sweep ended (0: none yet). */
  lastFullAt: number;
  /** Tasks running when the last full sweep was planned: more since (new submissions) bring a full sweep. */
  fullRunning: number;
  /**
   * The cursor of the unfiltered list's page where the last complete pass of it found the oldest
   * task in flight (null: the first page): where probes read, those tasks being the likeliest to
   * end first. Dropped when a probe with it fails.
   */
  tailCursor: string | null;
  /**
   * The time between full passes at the last one's reads and share, at the budget's steady pace:
   * probes never come less often (a probe saves reads only where a pass costs more than a page).
   */
  passMs: number;
}

export function newListState(): ListState {
  return {
    nextSweepAt: 0,
    cost: { active: null, all: null },
    lastEnded: 0,
    unsupportedUntil: 0,
    harvestUseful: null,
    warned: false,
    quiet: false,
    lastFullAt: 0,
    fullRunning: 0,
    tailCursor: null,
    passMs: Number.POSITIVE_INFINITY,
  };
}

/** What the list reads of one sweep found (src/workers/list-sweep.ts reads them). */
export interface SweepResult {
  /** Upstream tasks seen, by upstream id. */
  seen: Map<string, UpstreamTask>;
  /** Reads spent. */
  reads: number;
  /** Whether the active lists (queued, processing) were read to their end: only then does absence mean "finished". */
  complete: boolean;
  /** The list body was not understood: the account must fall back to single reads. */
  unsupported: boolean;
  /** An unfiltered pass only: the cursor its last page was read with (null: the first page). */
  tailCursor?: string | null;
}

/** What the poller knows of an account when it plans a tick. */
export interface AccountView {
  strategy: PollStrategy;
  /** Tasks of the account running upstream. */
  running: number;
  now: number;
  state: ListState;
}

/** Whether list sweeps watch the account (single reads then only fetch what a sweep found ended). */
export function sweepsCover(view: AccountView): boolean {
  return view.strategy === "adaptive" && view.running >= SWEEP_MIN_TASKS && view.now >= view.state.unsupportedUntil;
}

/**
 * The sweep step of an account's tick. skip: sweeps do not watch it. later: they do, the next one
 * is not due. sweep: due and the budget has its reads. wait: due, but `reads` must be free first
 * (a sweep cut short by the budget tells less than one that waits for its reads).
 */
export type SweepStep =
  | { kind: "skip" }
  | { kind: "later" }
  | { kind: "sweep"; sweep: SweepKind }
  | { kind: "probe" }
  | { kind: "wait"; reads: number };

export function planSweep(view: AccountView, budget: { available: number; perMinute: number }): SweepStep {
  if (!sweepsCover(view)) return { kind: "skip" };
  if (view.now < view.state.nextSweepAt) return { kind: "later" };
  // A probe reads the unfiltered list: not where it leaves out tasks of ours (cost Infinity).
  // Nor once tasks were submitted since the last full sweep: it has not seen them, nor where the
  // oldest in flight now is.
  const { quiet, lastFullAt, cost, fullRunning } = view.state;
  if (quiet && cost.all !== Infinity && view.running <= fullRunning && view.now - lastFullAt < QUIET_FULL_MS)
    return budget.available >= 1 ? { kind: "probe" } : { kind: "wait", reads: 1 };
  const sweep = sweepKind(view.state);
  const need = Math.min(budget.perMinute, Math.max(2, view.state.cost[sweep] ?? 2));
  return budget.available >= need ? { kind: "sweep", sweep } : { kind: "wait", reads: need };
}

/**
 * While tasks are ending (the last sweep found enough of them to make an active sweep read the
 * terminal lists), the unfiltered list unless it measured dearer than an active sweep with its
 * harvest; when none ended, the unfiltered list too (unless it does not show every task);
 * otherwise the active lists alone, which then need no harvest.
 */
export function sweepKind(state: ListState): SweepKind {
  const { active, all } = state.cost;
  // Nothing ended last time: both cost the pages down to the oldest task in flight; the unfiltered
  // list's pass also finds where that task is, for the probes of a quiet spell (tailCursor).
  if (state.lastEnded === 0 && all !== Infinity) return "all";
  if (state.lastEnded < HARVEST_MIN || all === Infinity || active === null || state.harvestUseful === false)
    return "active";
  return all === null || all <= active ? "all" : "active";
}

/**
 * The single reads of an account's tick. wait: no read is free. due: claim up to `limit` tasks due
 * now. ids: sweeps watch the account, so only the tasks a sweep flagged (ended, their result still
 * to fetch) are read; the others are left to the next sweep.
 */
export type SinglesStep = { kind: "wait" } | { kind: "due"; limit: number } | { kind: "ids"; ids: string[] };

export function planSingles(view: AccountView, available: number, flagged: Iterable<string>): SinglesStep {
  if (available <= 0) return { kind: "wait" };
  const limit = Math.min(available, SINGLE_BATCH);
  // A state never swept (nextSweepAt 0) has no flags yet: the tasks are read singly meanwhile.
  if (!sweepsCover(view) || view.state.nextSweepAt <= 0) return { kind: "due", limit };
  return { kind: "ids", ids: [...flagged].slice(0, limit) };
}

/** The oldest task of each kind (type and model): the one that decides whether its kind is due. */
export function oldestOfEachKind(inFlight: readonly InFlightTask[], now: number): InFlightTask[] {
  const oldest = new Map<string, InFlightTask>();
  for (const task of inFlight) {
    const key = `${task.type}\u0000${task.model}`;
    const seen = oldest.get(key);
    if (!seen || (task.submittedAt ?? now) < (seen.submittedAt ?? now)) oldest.set(key, task);
  }
  return [...oldest.values()];
}

/** `earlyMs`: the DUE_QUANTILE of its kind's durations; nothing learned yet (null): due, so the first durations are learned. */
export function isDue(task: InFlightTask, earlyMs: number | null, now: number): boolean {
  return earlyMs === null || now - (task.submittedAt ?? now) >= earlyMs;
}

/** How much of the budget sweeps may spend now (see SWEEP_SHARE_DUE); `flagged`: tasks waiting for a single read. */
export function sweepShare(anyDue: boolean, flagged: number): number {
  if (!anyDue) return SWEEP_SHARE_IDLE;
  return flagged > 0 ? SWEEP_SHARE_WITH_SINGLES : SWEEP_SHARE_DUE;
}

/** Reads one sweep may spend: its share of what is free, and never fewer than two. */
export function sweepReadCap(available: number, share: number): number {
  return Math.max(2, Math.floor(available * share));
}

/**
 * The unfiltered list's cost after a sweep of it. Every task seen: what it took. Short of reads:
 * not measured (unchanged). Otherwise the list does not show every task of ours (an order we
 * cannot follow): that kind is out.
 */
export function costOfAll(before: number | null, result: SweepResult, maxReads: number): number | null {
  if (result.complete) return result.reads;
  if (result.reads < maxReads && !result.unsupported) return Infinity;
  return before;
}

/** Upstream ids of in-flight tasks the active lists did not show, submitted before the sweep began. */
export function finishedCandidates(
  inFlight: readonly InFlightTask[],
  seen: Map<string, UpstreamTask>,
  sweepStartedAt: number,
): Set<string> {
  const candidates = new Set<string>();
  for (const task of inFlight) {
    if (task.upstreamTaskId && !seen.has(task.upstreamTaskId) && (task.submittedAt ?? 0) < sweepStartedAt)
      candidates.add(task.upstreamTaskId);
  }
  return candidates;
}

/** Absence means "ended" only when the active lists were read to their end. */
export function endedCandidates(
  inFlight: readonly InFlightTask[],
  result: SweepResult,
  sweepStartedAt: number,
): Set<string> {
  return result.complete ? finishedCandidates(inFlight, result.seen, sweepStartedAt) : new Set<string>();
}

/** Whether to read the terminal lists for the candidates' results (rather than one single read each). */
export function worthHarvesting(result: SweepResult, candidates: ReadonlySet<string>, state: ListState): boolean {
  return !result.unsupported && candidates.size >= HARVEST_MIN && state.harvestUseful !== false;
}

/**
 * After the terminal lists were read: the active sweep's cost (when the cap did not cut it short),
 * whether harvests bring outputs (judged from the succeeded candidates found), and the candidates
 * still unseen.
 */
export function afterHarvest(
  state: ListState,
  result: SweepResult,
  candidates: ReadonlySet<string>,
  maxReads: number,
): { active: number | null; harvestUseful: boolean | null; unseen: Set<string> } {
  const found = [...candidates].map((id) => result.seen.get(id)).filter((t) => t?.status === "succeeded");
  return {
    active: result.reads < maxReads ? result.reads : state.cost.active,
    harvestUseful:
      found.length > 0 ? found.some((t) => t!.output !== null && t!.output !== undefined) : state.harvestUseful,
    unseen: new Set([...candidates].filter((id) => !result.seen.has(id))),
  };
}

/**
 * What a sweep means for the account and each task in flight. unsupported: the list body was not
 * understood, single reads only until `unsupportedUntil`. read: `changed` tasks are claimed and
 * their observation recorded; `flag` tasks ended without what the list could tell (their output or
 * charge), so one single read each fetches it; every other task is left to the next sweep.
 */
export type SweepOutcome =
  | { kind: "unsupported"; unsupportedUntil: number }
  | {
      kind: "read";
      nextSweepAt: number;
      /** The read time written on changed tasks, used if sweeping stops (fewer tasks in flight): well after the next sweep. */
      coveredUntil: number;
      /** Tasks of ours found ended (for the next sweep's kind). */
      ended: number;
      /** Tasks the sweep settled or saw running: what single reads would have cost. */
      covered: number;
      changed: string[];
      flag: string[];
      /** Nothing ended: probes stand in for the next full sweeps (PROBE_READS). */
      quiet: boolean;
      /** This pass's steady pace (sweepInterval without the ending tasks' speed-up): probes come at least this often. */
      passMs: number;
    };

/**
 * Whether a list item settles its task: ended, with its output when it succeeded, and its charge.
 * Without either, one single read fetches what the list left out (docs/contract.md, "Upstream
 * answers": never "free").
 */
export function settles(remote: UpstreamTask | undefined): boolean {
  const status = remote?.status ?? null;
  return (
    status !== null &&
    TERMINAL_STATUSES.has(status) &&
    !(status === "succeeded" && (remote!.output === null || remote!.output === undefined)) &&
    remote!.usage.pointsCharged !== null
  );
}

/** The read budget as sweeps are paced by it; `readsInLast(ms)`: reads spent in the last `ms` (absent: none known). */
export interface PaceBudget {
  windowMs: number;
  perMinute: number;
  readsInLast?: (ms: number) => number;
}

export interface SweepOutcomeInput {
  inFlight: readonly InFlightTask[];
  result: SweepResult;
  /** Upstream ids taken as ended though no list showed them. */
  candidates: ReadonlySet<string>;
  now: number;
  share: number;
  budget: PaceBudget;
  /** When the previous full sweep ended (0: none), to tell how fast tasks end. */
  lastFullAt?: number;
}

/**
 * The time until the next full sweep. Paced over the budget's own window (a minute and its safety
 * second) at the sweep's share, so a sweep at full share finds its reads free again when it is
 * due. While tasks are ending, faster if the window has room: the reads the tasks in flight leave
 * to the budget until they are expected to have ended (`remaining` of them, ending at
 * `endedPerMs`), less one sweep's for after that, spread over that time. Reads left unspent in a quiet spell thus go to the
 * completions that follow it, and the pace falls back to the window's once they are spent; the
 * budget itself is never exceeded (a sweep waits for its reads: planSweep).
 */
export function sweepInterval(
  reads: number,
  share: number,
  budget: PaceBudget,
  ending?: { remaining: number; endedPerMs: number },
): number {
  const steady = (share * budget.perMinute) / budget.windowMs;
  let rate = steady;
  if (ending && ending.endedPerMs > 0 && ending.remaining > 0 && budget.readsInLast && share >= SWEEP_SHARE_DUE) {
    const horizon = Math.min(budget.windowMs, Math.max(MIN_SWEEP_INTERVAL_MS, ending.remaining / ending.endedPerMs));
    // Reads made before (now - window + horizon) have left the window by the horizon's end; one
    // more sweep is kept for after it (the last of the tasks end later than their mean says).
    const free = budget.perMinute - budget.readsInLast(budget.windowMs - horizon) - reads;
    rate = Math.min(MAX_PACE_FACTOR * steady, Math.max(steady, free / horizon));
  }
  return Math.round(Math.min(MAX_SWEEP_INTERVAL_MS, Math.max(MIN_SWEEP_INTERVAL_MS, reads / rate)));
}

/**
 * The pace of probes while the account is quiet: one read every PROBE_READS reads' worth of the
 * budget's steady pace, and never slower than full passes would come at their steady pace
 * (`passMs`): where a pass costs fewer reads than that, the probe would give away what the budget
 * has for tasks that may end (a quiet spell saves reads only on passes of several pages).
 */
export function probeInterval(budget: PaceBudget, passMs = Number.POSITIVE_INFINITY): number {
  return Math.min(passMs, Math.max(MIN_SWEEP_INTERVAL_MS, (PROBE_READS * budget.windowMs) / budget.perMinute));
}

/**
 * What a probe's page means. `ended`: it shows a task in flight ended (settles() ones were recorded
 * already): the quiet spell is over, the full sweep runs at once. `changed`: tasks in flight it
 * shows running in another status than recorded (queued to processing), recorded from the page;
 * they do not end the spell. Otherwise the next probe is paced by probeInterval.
 */
export function probeOutcome(
  inFlight: readonly InFlightTask[],
  seen: ReadonlyMap<string, UpstreamTask>,
  now: number,
  budget: PaceBudget,
  passMs = Number.POSITIVE_INFINITY,
): { ended: boolean; changed: string[]; nextSweepAt: number } {
  let ended = false;
  const changed: string[] = [];
  for (const task of inFlight) {
    const remote = task.upstreamTaskId ? seen.get(task.upstreamTaskId) : undefined;
    if (!remote || remote.status === null || remote.status === task.status) continue;
    if (TERMINAL_STATUSES.has(remote.status)) ended = true;
    else changed.push(task.id);
  }
  return { ended, changed, nextSweepAt: ended ? now : now + probeInterval(budget, passMs) };
}

export function sweepOutcome({
  inFlight,
  result,
  candidates,
  now,
  share,
  budget,
  lastFullAt = 0,
}: SweepOutcomeInput): SweepOutcome {
  if (result.unsupported) return { kind: "unsupported", unsupportedUntil: now + LIST_RETRY_MS };
  let covered = 0;
  let ended = 0;
  const changed: string[] = [];
  const flag: string[] = [];
  for (const task of inFlight) {
    const remote = task.upstreamTaskId ? result.seen.get(task.upstreamTaskId) : undefined;
    const status = remote?.status ?? null;
    const terminal = status !== null && TERMINAL_STATUSES.has(status);
    const settled = settles(remote);
    if (terminal || (task.upstreamTaskId && candidates.has(task.upstreamTaskId))) ended += 1;
    if (settled || (status !== null && !terminal)) {
      covered += 1;
      if (settled || status !== task.status) changed.push(task.id);
    } else if (task.upstreamTaskId && (candidates.has(task.upstreamTaskId) || remote)) {
      flag.push(task.id);
    }
  }
  const interval = sweepInterval(
    result.reads,
    share,
    budget,
    lastFullAt > 0 && now > lastFullAt
      ? { remaining: inFlight.length - ended, endedPerMs: ended / (now - lastFullAt) }
      : undefined,
  );
  // Tasks only moving from queued to processing do not keep the sweeps at their pace: reads go
  // where tasks end (a probe records such moves on its page; the full sweep within QUIET_FULL_MS).
  const quiet = ended === 0 && flag.length === 0;
  const passMs = sweepInterval(result.reads, share, budget);
  return {
    kind: "read",
    nextSweepAt: now + (quiet ? Math.min(interval, probeInterval(budget, passMs)) : interval),
    coveredUntil: now + 2 * interval + 5_000,
    ended,
    covered,
    changed,
    flag,
    quiet,
    passMs,
  };
}

/** What the poller knows of a failed upstream call (an UpstreamError's fields; null for any other error). */
export type UpstreamFailure = Pick<UpstreamError, "status" | "code" | "retryAfterMs" | "requestId" | "message"> | null;

/**
 * After a sweep that failed: when to try the list again, whether the account's reads pause (a 429)
 * and whether the list is out for a while (a page too large to read will not shrink: single reads
 * only, as for a list body not understood).
 */
export function sweepFailed(
  e: UpstreamFailure,
  now: number,
): { nextSweepAt: number; pauseUntil: number | null; unsupportedUntil: number | null } {
  return {
    nextSweepAt: now + (e?.retryAfterMs ?? 5_000),
    pauseUntil: e?.status === 429 ? now + (e.retryAfterMs ?? 10_000) : null,
    unsupportedUntil: e?.code === "response_too_large" ? now + LIST_RETRY_MS : null,
  };
}

/** When to read a task again after a good read: `expectedMs` is its kind's learned duration (ignored by round-robin). */
export function nextReadAt(
  task: Pick<TaskRow, "type" | "submittedAt" | "createdAt">,
  now: number,
  strategy: PollStrategy,
  expectedMs: number | null,
): number {
  if (strategy === "round-robin") return now;
  return now + nextPollDelay(task.type, now - (task.submittedAt ?? task.createdAt), expectedMs);
}

/**
 * What a failed single read means for the task. too_large: its answer will not shrink, the task
 * ends failed (its reservation stands as its charge: docs/contract.md, "Upstream answers"). paused: a 429, the account's
 * reads pause until then and the task waits as long. lost: JSON 404 task_not_found for
 * LOST_AFTER_MS, it ends failed. retry: backoff by the reads already made; `notFoundSince` starts
 * or continues a run of 404s (absent: the run, if any, goes on unchanged).
 */
export type ReadFailure =
  | { kind: "too_large"; error: TaskError }
  | { kind: "paused"; until: number }
  | { kind: "lost"; error: TaskError }
  | { kind: "retry"; at: number; pollCount: number; notFoundSince?: number };

/** `notFoundSince`: when the task's current run of 404 task_not_found answers began, if one runs. */
export function readFailed(
  task: Pick<TaskRow, "pollCount">,
  e: UpstreamFailure,
  now: number,
  notFoundSince: number | undefined,
): ReadFailure {
  if (e?.code === "response_too_large") {
    return {
      kind: "too_large",
      error: {
        code: "upstream_response_too_large",
        message: `${e.message}. The task may have been charged: check the upstream account.`,
        request_id: e.requestId,
      },
    };
  }
  if (e?.status === 429) return { kind: "paused", until: now + (e.retryAfterMs ?? 10_000) };
  const retry = {
    kind: "retry" as const,
    at: now + cappedBackoff({ attempt: task.pollCount, baseMs: 2_000, maxMs: 60_000 }),
    pollCount: task.pollCount + 1,
  };
  // Only the upstream's own JSON answer counts (an HTML or empty 404 from a proxy has no code).
  if (e?.status !== 404 || e.code !== "task_not_found") return retry;
  const since = notFoundSince ?? now;
  if (now - since < LOST_AFTER_MS) return { ...retry, notFoundSince: since };
  return {
    kind: "lost",
    error: {
      code: "task_not_found",
      message: `The upstream answered 404 task_not_found for this task for ${Math.round((now - since) / 60_000)} minutes; it is taken as lost. It may have been charged: check the upstream account.`,
      request_id: e.requestId,
    },
  };
}

/** When the poller's loop should tick next: the earliest due task, or a wake-up the tick asked for when that comes first (or nothing is due later). */
export function nextTickAt(due: number | null, wake: number | null, now: number): number | null {
  if (wake !== null && (due === null || due <= now || wake < due)) return wake;
  return due;
}

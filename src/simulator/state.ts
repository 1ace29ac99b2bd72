/**
 * Everything the simulator remembers: accounts, their tasks, idempotency records,
 * read windows and counters. Plain memory, no timers: time comes from the clock,
 * and a task's terminal state (with its refund) is applied the first time anyone
 * looks after it is due, which is indistinguishable from outside.
 */
import type { Clock } from "../clock.js";
import { systemClock } from "../clock.js";
import { newId } from "../ids.js";
import { SimError } from "./errors.js";
import {
  DEFAULT_ACCOUNT,
  DEFAULT_PUBLIC_BASE_URL,
  DEFAULT_TIMINGS,
  type SimulatorAccountOptions,
  type SimulatorOptions,
  type SimulatorTimings,
  type SimulatorVariation,
} from "./options.js";
import { imagePrice, videoPrice } from "./pricing.js";
import { buildOutput, FAIL_MARKER, schedule, statusAt, type SimTask, type TaskStatus, type TaskType } from "./task.js";
import type { GenerationRequest } from "./validation.js";

const READ_WINDOW_MS = 60_000;
/** Accepted read times kept per account for /_sim/reads (about 14 hours at 120 a minute); older ones are dropped. */
export const READ_LOG_LIMIT = 100_000;

export interface Counters {
  tasks_created: number;
  create_requests: number;
  replays: number;
  task_reads: number;
  rate_limited: number;
  concurrent_limited: number;
}

export interface AccountStats extends Counters {
  running: number;
  balance: number;
}

export interface SimulatorStats extends Counters {
  per_account: Record<string, AccountStats>;
}

interface IdempotencyRecord {
  fingerprint: string;
  task: SimTask;
}

export interface Account {
  readonly apiKey: string;
  balance: number;
  maxConcurrent: number;
  readsPerMinute: number;
  readonly tasks: SimTask[];
  readonly running: Set<SimTask>;
  readonly idempotency: Map<string, IdempotencyRecord>;
  readonly creationsPerKey: Map<string, number>;
  /** Times of accepted reads inside the current window, oldest first. */
  readonly reads: number[];
  readonly counters: Counters;
  /** Times of accepted reads, oldest first (the last READ_LOG_LIMIT at most). */
  readonly readLog: number[];
  /** Accepted reads by endpoint, and the most accepted reads in any 60 s window so far. */
  readonly readsBy: { single: number; list: number; maxInAnyMinute: number; logDropped: number };
}

/** What the admin route /_sim/reads shows of one account's task reads. */
export interface ReadLog {
  task_reads: number;
  single_reads: number;
  list_reads: number;
  rate_limited: number;
  max_reads_in_any_minute: number;
  /** Times (ms since the epoch) of accepted reads, oldest first; `dropped` older ones are no longer kept. */
  times: number[];
  dropped: number;
}

/** What the admin route /_sim/tasks shows of one task: when it was created, started and ended (ms since the epoch). */
export interface TaskTimeline {
  id: string;
  idempotency_key: string;
  type: TaskType;
  model: string;
  outcome: "succeeded" | "failed";
  created_at_ms: number;
  processing_at_ms: number;
  completed_at_ms: number;
}

export type IdempotencyLookup = { kind: "new" } | { kind: "replay"; task: SimTask } | { kind: "conflict" };

export interface ListQuery {
  limit: number;
  afterId?: string;
  type?: TaskType;
  status?: TaskStatus;
}

const zeroCounters = (): Counters => ({
  tasks_created: 0,
  create_requests: 0,
  replays: 0,
  task_reads: 0,
  rate_limited: 0,
  concurrent_limited: 0,
});

export class SimulatorState {
  readonly clock: Clock;
  private readonly accounts = new Map<string, Account>();
  private readonly tasksById = new Map<string, SimTask>();
  private currentTimings: SimulatorTimings;
  private baseUrl: string;
  private readonly variation: SimulatorVariation;
  private readonly random: () => number;

  constructor(options: SimulatorOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.currentTimings = { ...DEFAULT_TIMINGS, ...options.timings };
    this.variation = { ...options.variation };
    this.random = seededRandom(options.variation?.seed ?? 1);
    this.baseUrl = stripSlash(options.publicBaseUrl ?? DEFAULT_PUBLIC_BASE_URL);
    for (const acc of options.accounts ?? [{ apiKey: "sandbox" }]) this.addAccount(acc);
  }

  get publicBaseUrl(): string {
    return this.baseUrl;
  }

  /** For startSimulator, which learns its own address only after listening. */
  setPublicBaseUrl(url: string): void {
    this.baseUrl = stripSlash(url);
  }

  get timings(): SimulatorTimings {
    return { ...this.currentTimings };
  }

  /** Applies to tasks created from now on; existing tasks keep the schedule they were created with. */
  setTimings(partial: Partial<SimulatorTimings>): void {
    this.currentTimings = { ...this.currentTimings, ...partial };
  }

  addAccount(opts: SimulatorAccountOptions): void {
    if (this.accounts.has(opts.apiKey)) throw new Error("simulator account already exists");
    this.accounts.set(opts.apiKey, {
      apiKey: opts.apiKey,
      balance: opts.balance ?? DEFAULT_ACCOUNT.balance,
      maxConcurrent: opts.maxConcurrent ?? DEFAULT_ACCOUNT.maxConcurrent,
      readsPerMinute: opts.readsPerMinute ?? DEFAULT_ACCOUNT.readsPerMinute,
      tasks: [],
      running: new Set(),
      idempotency: new Map(),
      creationsPerKey: new Map(),
      reads: [],
      counters: zeroCounters(),
      readLog: [],
      readsBy: { single: 0, list: 0, maxInAnyMinute: 0, logDropped: 0 },
    });
  }

  findAccount(apiKey: string): Account | undefined {
    return this.accounts.get(apiKey);
  }

  setBalance(apiKey: string, balance: number): void {
    const account = this.requireAccount(apiKey);
    // Refunds already due are applied first, so the new balance is not topped up by them later.
    this.settle(account);
    account.balance = balance;
  }

  balance(apiKey: string): number {
    const account = this.requireAccount(apiKey);
    this.settle(account);
    return account.balance;
  }

  stats(): SimulatorStats {
    const total = zeroCounters();
    const perAccount: Record<string, AccountStats> = {};
    for (const account of this.accounts.values()) {
      this.settle(account);
      for (const k of Object.keys(total) as (keyof Counters)[]) total[k] += account.counters[k];
      perAccount[account.apiKey] = { ...account.counters, running: account.running.size, balance: account.balance };
    }
    return { ...total, per_account: perAccount };
  }

  /** Tasks created per Idempotency-Key for one account; every value must be 1 (no double charge). */
  creationsByIdempotencyKey(apiKey: string): Map<string, number> {
    return new Map(this.requireAccount(apiKey).creationsPerKey);
  }

  /** The largest number of tasks created for any single Idempotency-Key, over all accounts (0 when none). */
  maxCreationsPerKey(): number {
    let max = 0;
    for (const account of this.accounts.values()) {
      for (const n of account.creationsPerKey.values()) max = Math.max(max, n);
    }
    return max;
  }

  /** Applies terminal states that are due: frees the concurrency slot, refunds a failure. */
  settle(account: Account): void {
    const now = this.clock.now();
    for (const task of account.running) {
      if (now < task.completedAt) continue;
      task.settled = true;
      account.running.delete(task);
      if (task.outcome === "failed") {
        task.refunded = task.price;
        account.balance += task.price;
      }
    }
  }

  noteCreateRequest(account: Account): void {
    account.counters.create_requests++;
  }

  lookupIdempotency(account: Account, key: string, fingerprint: string): IdempotencyLookup {
    const record = account.idempotency.get(key);
    if (!record) return { kind: "new" };
    if (record.fingerprint !== fingerprint) return { kind: "conflict" };
    account.counters.replays++;
    this.settle(account);
    return { kind: "replay", task: record.task };
  }

  /** Creates and charges a task, or throws 429 concurrent_limit / 402 insufficient_points. */
  create(account: Account, key: string, fingerprint: string, req: GenerationRequest): SimTask {
    const now = this.clock.now();
    this.settle(account);
    // Concurrency first: a full account may get credits back from a failing task before a retry.
    if (account.running.size >= account.maxConcurrent) {
      account.counters.concurrent_limited++;
      const nextFree = Math.min(...[...account.running].map((t) => t.completedAt));
      throw new SimError(
        429,
        "concurrent_limit",
        `Too many running tasks (limit ${account.maxConcurrent}); wait for one to finish`,
        undefined,
        { "Retry-After": String(secondsUntil(nextFree, now)) },
      );
    }
    const price =
      req.type === "image" ? imagePrice(req.model, req.quality, req.size) : videoPrice(req.resolution, req.duration);
    if (account.balance < price) {
      throw new SimError(
        402,
        "insufficient_points",
        `Insufficient credits: the task costs ${price}, the balance is ${account.balance}`,
      );
    }
    const timing = this.drawTiming(req.type);
    const failedByChance = !req.prompt.includes(FAIL_MARKER) && this.drawFailure();
    const id = newId("up", now);
    const task: SimTask = {
      id,
      seq: account.tasks.length,
      apiKey: account.apiKey,
      type: req.type,
      model: req.model,
      idempotencyKey: key,
      price,
      refunded: 0,
      createdAt: now,
      ...schedule(now, timing),
      outcome: req.prompt.includes(FAIL_MARKER) || failedByChance ? "failed" : "succeeded",
      ...(failedByChance ? { failedByChance: true } : {}),
      settled: false,
      output: buildOutput(id, req, this.baseUrl),
    };
    account.balance -= price;
    account.tasks.push(task);
    account.running.add(task);
    account.idempotency.set(key, { fingerprint, task });
    account.creationsPerKey.set(key, (account.creationsPerKey.get(key) ?? 0) + 1);
    account.counters.tasks_created++;
    this.tasksById.set(id, task);
    return task;
  }

  /** The task's queued and processing times: the current timings, processing drawn from its range when one is set. */
  private drawTiming(type: TaskType): { queuedMs: number; processingMs: number } {
    const t = this.currentTimings;
    const queuedMs = type === "image" ? t.imageQueuedMs : t.videoQueuedMs;
    const min = type === "image" ? t.imageProcessingMs : t.videoProcessingMs;
    const max = type === "image" ? this.variation.imageProcessingMaxMs : this.variation.videoProcessingMaxMs;
    if (max === undefined || max <= min) return { queuedMs, processingMs: min };
    return { queuedMs, processingMs: min + Math.floor(this.random() * (max - min + 1)) };
  }

  private drawFailure(): boolean {
    const rate = this.variation.failureRate ?? 0;
    return rate > 0 && this.random() < rate;
  }

  /**
   * Counts one task read against the sliding window, or throws 429 rate_limit (which is not counted).
   * The window is kept also without a limit, for the busiest-minute figure of /_sim/reads.
   */
  recordRead(account: Account, kind: "single" | "list" = "single"): void {
    const now = this.clock.now();
    const reads = account.reads;
    while (reads.length > 0 && reads[0]! <= now - READ_WINDOW_MS) reads.shift();
    if (account.readsPerMinute > 0) {
      if (reads.length >= account.readsPerMinute) {
        account.counters.rate_limited++;
        const retryAfter = secondsUntil(reads[0]! + READ_WINDOW_MS, now);
        throw new SimError(
          429,
          "rate_limit",
          `Task read rate exceeded (${account.readsPerMinute} per minute); retry after ${retryAfter} s`,
          undefined,
          { "Retry-After": String(retryAfter) },
        );
      }
    }
    reads.push(now);
    account.counters.task_reads++;
    const by = account.readsBy;
    by[kind]++;
    by.maxInAnyMinute = Math.max(by.maxInAnyMinute, reads.length);
    account.readLog.push(now);
    if (account.readLog.length > READ_LOG_LIMIT) {
      const drop = account.readLog.length - READ_LOG_LIMIT;
      account.readLog.splice(0, drop);
      by.logDropped += drop;
    }
  }

  /** One account's accepted reads: counts, the busiest 60 s window, and their times (for /_sim/reads). */
  readsOf(apiKey: string): ReadLog {
    const account = this.requireAccount(apiKey);
    const by = account.readsBy;
    return {
      task_reads: account.counters.task_reads,
      single_reads: by.single,
      list_reads: by.list,
      rate_limited: account.counters.rate_limited,
      max_reads_in_any_minute: by.maxInAnyMinute,
      times: [...account.readLog],
      dropped: by.logDropped,
    };
  }

  /** One account's tasks in creation order, with the instants fixed at creation (for /_sim/tasks). */
  taskTimelines(apiKey: string): TaskTimeline[] {
    return this.requireAccount(apiKey).tasks.map((t) => ({
      id: t.id,
      idempotency_key: t.idempotencyKey,
      type: t.type,
      model: t.model,
      outcome: t.outcome,
      created_at_ms: t.createdAt,
      processing_at_ms: t.processingAt,
      completed_at_ms: t.completedAt,
    }));
  }

  getTask(account: Account, id: string): SimTask {
    const task = this.tasksById.get(id);
    // Another account's task is reported exactly like an unknown one (docs/upstream.md, "Authentication").
    if (!task || task.apiKey !== account.apiKey) throw new SimError(404, "task_not_found", `Task ${id} was not found`);
    this.settle(account);
    return task;
  }

  /** A task by id regardless of account, for the public output file URLs. */
  taskById(id: string): SimTask | undefined {
    const task = this.tasksById.get(id);
    if (task) this.settle(this.requireAccount(task.apiKey));
    return task;
  }

  /** Newest first; `afterId` continues after that task. Filters see the current lazy status. */
  listTasks(account: Account, query: ListQuery): { items: SimTask[]; hasMore: boolean } {
    this.settle(account);
    const now = this.clock.now();
    let start = account.tasks.length - 1;
    if (query.afterId !== undefined) {
      const after = this.tasksById.get(query.afterId);
      if (!after || after.apiKey !== account.apiKey) throw new SimError(400, "invalid_request", "cursor is not valid");
      start = after.seq - 1;
    }
    const items: SimTask[] = [];
    for (let i = start; i >= 0; i--) {
      const task = account.tasks[i]!;
      if (query.type && task.type !== query.type) continue;
      if (query.status && statusAt(task, now) !== query.status) continue;
      if (items.length === query.limit) return { items, hasMore: true };
      items.push(task);
    }
    return { items, hasMore: false };
  }

  private requireAccount(apiKey: string): Account {
    const account = this.accounts.get(apiKey);
    if (!account) throw new Error("unknown simulator account");
    return account;
  }
}

/** mulberry32: a small seeded generator of floats in [0, 1) (bench/fairness.mjs draws from it too). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function secondsUntil(atMs: number, nowMs: number): number {
  return Math.max(1, Math.ceil((atMs - nowMs) / 1000));
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/u, "");
}

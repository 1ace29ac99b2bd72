import type { Clock } from "./clock.js";
import type { Config } from "./config.js";
import type { Database_ } from "./db/open.js";
import { releaseEventLeases } from "./db/events.js";
import { releaseTaskLeases } from "./db/tasks.js";
import { createApp } from "./http/app.js";
import type { Logger } from "./logger.js";
import { Metrics } from "./metrics.js";
import { CatalogCache } from "./services/catalog.js";
import { DeliveryService } from "./services/deliveries.js";
import type { Nudges, ServiceDeps } from "./services/deps.js";
import { UpstreamAccounts } from "./services/upstream-accounts.js";
import type { Resolver } from "./webhooks/ssrf.js";
import { WebhookSender } from "./webhooks/sender.js";
import { Dispatcher } from "./workers/dispatcher.js";
import { WorkerLoop } from "./workers/loop.js";
import { LeaseOwner } from "./workers/owner.js";
import { Poller, type PollStrategy } from "./workers/poller.js";
import { Pruner } from "./workers/pruner.js";
import { ReadBudget } from "./workers/read-budget.js";
import { Submitter } from "./workers/submitter.js";

export interface RelayOptions {
  config: Config;
  database: Database_;
  clock: Clock;
  logger: Logger;
  /** Where the upstream lives and the default account's key (the sandbox simulator's in sandbox mode). */
  upstream: { baseUrl: string; apiKey: string };
  fetch?: typeof fetch;
  resolve?: Resolver;
  /** Poll scheduling; "round-robin" is the naive baseline the benchmarks compare against. */
  pollStrategy?: PollStrategy;
}

/**
 * Wires the relay's parts together: the HTTP app, the three worker loops and what they share.
 * main.ts owns the process (listening, signals); tests build a Relay and drive its workers directly.
 */
export class Relay {
  readonly app: ReturnType<typeof createApp>;
  readonly submitter: Submitter;
  readonly poller: Poller;
  readonly dispatcher: Dispatcher;
  readonly pruner: Pruner;
  readonly budget: ReadBudget;
  readonly sender: WebhookSender;
  readonly owner = new LeaseOwner();
  readonly loops: WorkerLoop[];
  readonly deps: ServiceDeps;
  readonly metrics: Metrics;

  constructor(private readonly opts: RelayOptions) {
    const { config, database, clock, logger } = opts;
    const db = database.db;
    const nudges: Nudges = {
      submitter: () => this.loops[0]?.nudge(),
      poller: () => this.loops[1]?.nudge(),
      dispatcher: () => this.loops[2]?.nudge(),
    };
    this.deps = { db, clock, config, logger, nudges };
    const accounts = new UpstreamAccounts(db, config, opts.upstream.baseUrl, opts.upstream.apiKey, opts.fetch);
    this.budget = new ReadBudget(db, clock, config.upstreamReadsPerMinute);
    const metrics = new Metrics({ db, reads: () => this.budget.snapshot() });
    this.metrics = metrics;
    this.sender = new WebhookSender({ allowPrivateNetworks: config.webhookAllowPrivateNetworks, ...(opts.resolve ? { resolve: opts.resolve } : {}) });
    this.submitter = new Submitter({ db, clock, config, logger, accounts, owner: this.owner, nudges, metrics });
    this.poller = new Poller({
      db,
      clock,
      config,
      logger,
      accounts,
      budget: this.budget,
      owner: this.owner,
      nudges,
      metrics,
      ...(opts.pollStrategy ? { strategy: opts.pollStrategy } : {}),
    });
    this.dispatcher = new Dispatcher({
      db,
      clock,
      config,
      logger,
      sender: this.sender,
      owner: this.owner,
      maxPerHost: config.webhookMaxInFlightPerHost,
      onAttempt: (event, result) => {
        metrics.webhookAttempts.inc({ outcome: result.ok ? "succeeded" : result.blocked ? "blocked" : "failed" });
        if (result.ok) metrics.deliveryLatency.observe(Math.max(0, clock.now() - event.createdAt) / 1000);
      },
    });
    this.pruner = new Pruner({ db, clock, logger, retentionDays: config.taskRetentionDays });
    this.loops = [
      new WorkerLoop({ name: "submitter", clock, logger, tick: () => this.submitter.runOnce() }),
      new WorkerLoop({ name: "poller", clock, logger, tick: () => this.poller.runOnce() }),
      new WorkerLoop({ name: "dispatcher", clock, logger, tick: () => this.dispatcher.tick() }),
      new WorkerLoop({ name: "pruner", clock, logger, tick: () => this.pruner.tick(), idleMs: 60 * 60 * 1000 }),
    ];
    this.dispatcher.onSettled = () => nudges.dispatcher();
    const deliveries = new DeliveryService(this.deps, this.sender);
    this.app = createApp({
      ...this.deps,
      catalog: new CatalogCache(accounts, clock, logger),
      readiness: { check: () => this.problems() },
      deliveries,
      metrics,
      // The dashboard's breaker view; a thin adapter so re-keying the breakers changes only this.
      hostHealth: (_clientId, hosts) => hosts.map((host) => ({ host, state: this.dispatcher.breakers.state(host), failures: this.dispatcher.breakers.failures(host) })),
    });
  }

  start(): void {
    for (const loop of this.loops) loop.start();
  }

  /** Why the relay is not ready: database not writable, or a worker loop stopped or stalled. */
  problems(): string[] {
    const problems: string[] = [];
    const sqlite = this.opts.database.sqlite;
    // No waiting here: a lock held by another writer (the CLI) means busy, not unwritable.
    sqlite.pragma("busy_timeout = 0");
    try {
      sqlite.prepare("BEGIN IMMEDIATE").run();
      sqlite.prepare("ROLLBACK").run();
    } catch (err) {
      if ((err as { code?: string }).code !== "SQLITE_BUSY") problems.push(`database not writable: ${(err as Error).message}`);
    } finally {
      sqlite.pragma("busy_timeout = 5000");
    }
    const now = this.opts.clock.now();
    for (const loop of this.loops) {
      if (!loop.isRunning) problems.push(`worker ${loop.name} not running`);
      else if (loop.name !== "pruner" && now - loop.lastBeatAt > 120_000) problems.push(`worker ${loop.name} stalled for ${Math.round((now - loop.lastBeatAt) / 1000)} s`);
    }
    return problems;
  }

  /** Stops claiming, waits for in-flight work up to the deadline, then releases every lease this process holds. */
  async stop(deadlineMs = 10_000): Promise<void> {
    const stopped = Promise.all(this.loops.map((l) => l.stop())).then(() => this.dispatcher.drain());
    await Promise.race([stopped, new Promise((r) => setTimeout(r, deadlineMs).unref())]);
    const db = this.opts.database.db;
    releaseTaskLeases(db, this.owner.id);
    releaseEventLeases(db, this.owner.id);
    await this.sender.close();
  }
}

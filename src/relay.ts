import type { Clock } from "./clock.js";
import type { Config } from "./config.js";
import type { Store } from "./store/store.js";
import { deliveryKey } from "./store/delivery-key.js";
import { ApiKeyCache, sealPlainSecrets } from "./services/clients.js";
import { destinationHost } from "./webhooks/destination.js";
import { createApp } from "./http/app.js";
import { serverWithDirectCreations } from "./http/direct-creations.js";
import type { Logger } from "./logger.js";
import { Metrics } from "./metrics.js";
import { CatalogCache } from "./services/catalog.js";
import { ClientRows } from "./services/client-rows.js";
import { DeliveryService } from "./services/deliveries.js";
import type { ServiceDeps } from "./services/deps.js";
import { creationWakesSubmitter, nudgesByName } from "./core/nudges.js";
import { UpstreamAccounts } from "./upstream/accounts.js";
import type { Resolver } from "./net/address-guard.js";
import { WebhookSender } from "./webhooks/sender.js";
import { Destinations } from "./destinations/index.js";
import { httpDestination, WEBHOOK_KIND } from "./destinations/http.js";
import { queueKinds } from "./destinations/queues.js";
import { queueTargets } from "./services/queue-endpoints.js";
import { Dispatcher } from "./workers/dispatcher.js";
import { WorkerLoop, type LoopOptions } from "./workers/loop.js";
import { LeaseOwner } from "./workers/owner.js";
import { Poller } from "./workers/poller.js";
import type { PollStrategy } from "./core/poll-plan.js";
import { Pruner } from "./workers/pruner.js";
import { Mirror } from "./workers/mirror.js";
import { mirrorsOutput } from "./core/mirror-decision.js";
import { readinessProblems } from "./core/readiness.js";
import { attemptVerdict } from "./core/delivery.js";
import { Notifier } from "./workers/notifier.js";
import { KeyHealth } from "./core/key-health.js";
import { ReadBudget } from "./workers/read-budget.js";
import { Submitter } from "./workers/submitter.js";
import { Leadership } from "./workers/leadership.js";
import { DurationStats } from "./workers/duration-stats.js";
import { Lifecycle } from "./core/lifecycle.js";
import { TaskWaiters } from "./core/task-waiters.js";
import { StreamHub } from "./core/stream-hub.js";
import { TaskWatchers } from "./core/task-watchers.js";
import { STREAMS_PER_CLIENT } from "./services/streams.js";
import { DatabaseHealth } from "./store/database-health.js";

/** Requests one API key may hold with Prefer: wait at once (docs/contract.md, "Waiting for the result"). */
export const HELD_WAITS_PER_CLIENT = 20;

/** The relay's worker loops; each is built once under its name and reached by it (nudges, readiness, tests). */
export type LoopName = "submitter" | "poller" | "dispatcher" | "notifier" | "pruner" | "catalog" | "mirror";

export interface RelayOptions {
  config: Config;
  /** Where everything is kept (SqliteStore by default, PgStore with DATABASE_URL); the relay closes it on close(). */
  store: Store;
  clock: Clock;
  logger: Logger;
  /** Where the upstream lives and the default account's key (the sandbox simulator's in sandbox mode). */
  upstream: { baseUrl: string; apiKey: string };
  /** Upstream calls go through this fetch when given (msw intercepts only the global one); else an undici pool. */
  fetch?: typeof fetch;
  resolve?: Resolver;
  /** Poll scheduling; "round-robin" is the naive baseline the benchmarks compare against. */
  pollStrategy?: PollStrategy;
}

/**
 * Wires the relay's parts together: the HTTP app, the worker loops and what they share. Decisions
 * live in core/ (readiness, the mirror decision, when a creation wakes the submitter); this only connects.
 * main.ts owns the process (listening, signals); tests build a Relay and drive its workers directly.
 */
export class Relay {
  readonly app: ReturnType<typeof createApp>;
  /** The server to serve `app` with (@hono/node-server's `createServer`): creations on their direct path. */
  readonly createServer: ReturnType<typeof serverWithDirectCreations>;
  readonly submitter: Submitter;
  readonly poller: Poller;
  readonly dispatcher: Dispatcher;
  readonly pruner: Pruner;
  readonly mirror: Mirror;
  readonly notifier: Notifier;
  readonly health: KeyHealth;
  readonly budget: ReadBudget;
  /** Learned durations, written behind: flushed on stop(). */
  private readonly durations: DurationStats;
  /** Client rows for the bucket decision of each success (kept until the client changes). */
  private readonly bucketRows: ClientRows;
  readonly sender: WebhookSender;
  /** Where deliveries go, by the endpoint's kind: a new kind registers here (docs/architecture.md, "Destinations"). */
  readonly destinations: Destinations;
  /** Closes the upstream's connections (stop()). */
  private readonly closeUpstream: () => Promise<void>;
  /** Closes the queue kinds' broker connections (stop()). */
  private readonly closeQueues: () => Promise<void>;
  readonly owner = new LeaseOwner();
  /** Which upstream accounts this instance leads, with their fences (shared by the submitter and the poller). */
  readonly leadership: Leadership;
  /** Every loop, by name. */
  readonly loopsByName: Readonly<Record<LoopName, WorkerLoop>>;
  /** The same loops in start order. */
  readonly loops: WorkerLoop[];
  readonly deps: ServiceDeps;
  readonly metrics: Metrics;
  readonly lifecycle: Lifecycle;
  readonly catalog: CatalogCache;
  readonly database: DatabaseHealth;
  /**
   * Everything woken by task transitions, in one registry (core/task-watchers.ts): held requests
   * and event streams are both its watchers, woken, resynced and ended together.
   */
  readonly watchers = new TaskWatchers();
  readonly waiters = new TaskWaiters({ perClient: HELD_WAITS_PER_CLIENT, registry: this.watchers });
  /** Open event streams (GET …/events); woken by task transitions, ended first on stop(). */
  readonly streams = new StreamHub({ perClient: STREAMS_PER_CLIENT, registry: this.watchers });

  constructor(private readonly opts: RelayOptions) {
    const { config, store, clock, logger } = opts;
    // Looked up when a nudge comes: the loops are built last, from the workers below.
    const nudges = nudgesByName((name) => this.loopsByName?.[name]);
    // On SQLite the parse worker writes a long output's pieces itself (its own connection), so they
    // never reach this heap; PostgreSQL's driver writes them from here, as they come.
    const accounts = new UpstreamAccounts(
      store,
      config,
      opts.upstream.baseUrl,
      opts.upstream.apiKey,
      opts.fetch,
      store.dialect === "sqlite",
    );
    this.closeUpstream = () => accounts.close();
    this.budget = new ReadBudget(store, clock, config.upstreamReadsPerMinute);
    const metrics = new Metrics({ store, reads: () => this.budget.snapshot() });
    this.metrics = metrics;
    this.sender = new WebhookSender({
      allowPrivateNetworks: config.webhookAllowPrivateNetworks,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
    });
    // The queue kinds (docs/destinations.md) read an endpoint's sealed settings by its id.
    const queues = queueKinds({
      allowPrivateNetworks: config.webhookAllowPrivateNetworks,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
      targets: queueTargets({ store, config }),
    });
    this.closeQueues = queues.close;
    this.destinations = new Destinations().register(
      WEBHOOK_KIND,
      httpDestination(this.sender, { allowPrivateNetworks: config.webhookAllowPrivateNetworks }),
    );
    for (const [kind, entry] of Object.entries(queues.kinds)) this.destinations.register(kind, entry);
    const durations = new DurationStats(store, clock);
    this.durations = durations;
    const bucketRows = new ClientRows({ store });
    this.bucketRows = bucketRows;
    this.lifecycle = new Lifecycle({
      store,
      clock,
      nudges,
      firstAttemptDelayMs: config.webhookRetryScheduleMs[0] ?? 0,
      onSucceeded: (task, ms) => durations.record(task.type, task.model, ms),
      expectedDuration: (task) => durations.expected(task.type, task.model),
      // A client with a bucket gets copies of the output's files before task.succeeded (docs/contract.md, "Outputs").
      mirrors: (task, output) =>
        mirrorsOutput(output, async () => (await bucketRows.find(task.clientId))?.storageConfig),
      onTransition: (task) => {
        this.watchers.wake({ taskId: task.id, clientId: task.clientId, account: task.upstreamAccount });
      },
    });
    this.catalog = new CatalogCache(accounts, clock, logger);
    this.health = new KeyHealth({ store, clock, logger, onNotice: () => this.loopsByName?.notifier.nudge() });
    this.database = new DatabaseHealth(clock, logger);
    this.deps = {
      store,
      clock,
      config,
      logger,
      nudges,
      lifecycle: this.lifecycle,
      catalog: this.catalog,
      database: this.database,
      waiters: this.waiters,
      streams: this.streams,
    };
    // An account taken over from a frozen or dead leader has its tasks released: the loops look at once.
    const leadership = new Leadership(store, logger, { holder: this.owner.id, leaseMs: config.leaderLeaseMs }, () => {
      nudges.submitter();
      nudges.poller();
    });
    this.leadership = leadership;
    this.submitter = new Submitter({
      store,
      clock,
      config,
      logger,
      accounts,
      owner: this.owner,
      nudges,
      metrics,
      lifecycle: this.lifecycle,
      leadership,
    });
    // A creation wakes the submitter unless its account is full (a task with a deadline always does, for its expiry).
    nudges.created = (account, expiresAt) => {
      if (creationWakesSubmitter(expiresAt, () => this.submitter.isFull(account))) nudges.submitter();
    };
    this.poller = new Poller({
      tasks: store.tasks,
      clock,
      config,
      logger,
      accounts,
      budget: this.budget,
      owner: this.owner,
      lifecycle: this.lifecycle,
      leadership,
      durations,
      metrics,
      ...(opts.pollStrategy ? { strategy: opts.pollStrategy } : {}),
    });
    // Deliveries and notices leave through the same port, under the same owner, following the same keys' health.
    const outbound = {
      store,
      clock,
      config,
      logger,
      sender: this.sender,
      destinations: this.destinations,
      owner: this.owner,
      health: this.health,
    };
    this.dispatcher = new Dispatcher({
      ...outbound,
      maxPerHost: config.webhookMaxInFlightPerHost,
      maxInFlight: config.webhookMaxInFlight,
      onAttempt: (event, result) => {
        metrics.webhookAttempts.inc({ outcome: attemptVerdict(result) });
        if (result.ok) metrics.deliveryLatency.observe(Math.max(0, clock.now() - event.createdAt) / 1000);
      },
    });
    nudges.endpointRemoved = (clientId) => this.dispatcher.letGoOfClient(clientId);
    this.notifier = new Notifier(outbound);
    this.pruner = new Pruner({ store, clock, logger, retentionDays: config.taskRetentionDays });
    this.mirror = new Mirror({
      store,
      clock,
      logger,
      owner: this.owner,
      lifecycle: this.lifecycle,
      encryptionKey: config.encryptionKey,
      allowPrivateNetworks: config.webhookAllowPrivateNetworks,
      maxBytes: config.mirrorMaxBytes,
      publicBaseUrl: config.publicBaseUrl,
      ...(opts.resolve ? { resolve: opts.resolve } : {}),
      metrics: {
        fileCopied: (bytes, seconds) => {
          metrics.mirrorFiles.inc({ outcome: "copied" });
          metrics.mirrorBytes.inc(bytes);
          metrics.mirrorCopySeconds.observe(seconds);
        },
        fileFailed: () => metrics.mirrorFiles.inc({ outcome: "failed" }),
        attemptFailed: (kind) => metrics.mirrorFailures.inc({ kind }),
      },
    });
    this.mirror.onSettled = () => nudges.mirror?.();
    const loop = (name: LoopName, opts: Omit<LoopOptions, "name" | "clock" | "logger" | "database">) =>
      new WorkerLoop({ name, clock, logger, database: this.database, ...opts });
    this.loopsByName = {
      // Every creation nudges the submitter: a burst of them makes one tick every 10 ms, not one each.
      submitter: loop("submitter", { tick: () => this.submitter.runOnce(), coalesceMs: 10 }),
      poller: loop("poller", { tick: () => this.poller.runOnce() }),
      dispatcher: loop("dispatcher", { tick: () => this.dispatcher.tick() }),
      notifier: loop("notifier", { tick: () => this.notifier.tick() }),
      pruner: loop("pruner", { tick: () => this.pruner.tick(), idleMs: 60 * 60 * 1000 }),
      // Keeps the model catalog warm, so intake checks requests against it without waiting on the upstream.
      catalog: loop("catalog", {
        tick: async () => ({ didWork: false, nextDueAt: await this.catalog.refreshDue() }),
        idleMs: 10 * 60 * 1000,
      }),
      // Copies succeeded tasks' outputs into their clients' buckets before task.succeeded is written.
      mirror: loop("mirror", { tick: () => this.mirror.tick() }),
    };
    this.loops = Object.values(this.loopsByName);
    this.dispatcher.onSettled = () => nudges.dispatcher();
    this.notifier.onSettled = () => this.loopsByName.notifier.nudge();
    const deliveries = new DeliveryService(this.deps, this.dispatcher);
    // One key cache for both ways in: a creation's key is looked up once, whichever path answers it.
    const apiKeys = new ApiKeyCache(this.deps);
    this.createServer = serverWithDirectCreations({ ...this.deps, metrics, apiKeys });
    this.app = createApp({
      ...this.deps,
      apiKeys,
      catalog: this.catalog,
      readiness: { check: () => this.problems() },
      deliveries,
      metrics,
      // The dashboard's breaker view: breakers are keyed per (client, destination host), see dispatcher.ts.
      hostHealth: (clientId, hosts) =>
        hosts.map((host) => ({
          host,
          state: this.dispatcher.breakers.state(deliveryKey(clientId, host)),
          failures: this.dispatcher.breakers.failures(deliveryKey(clientId, host)),
        })),
    });
  }

  /**
   * Starts the loops. First, what a previous process left: on SQLite one relay process owns the
   * database, so every lease still held is a dead process's (a kill -9) and is released at once,
   * instead of waiting for it to expire; events from before destination_host get theirs; webhook
   * secrets still in plain text are sealed once RELAY_ENCRYPTION_KEY is set.
   */
  async start(): Promise<void> {
    await this.recover();
    await this.listen();
    for (const loop of this.loops) loop.start();
  }

  /**
   * Other instances sharing the store wake these loops when they write what the loops act on, and
   * wake requests held here on a task they changed (a no-op on SQLite, where this process is alone).
   */
  async listen(): Promise<void> {
    await this.opts.store.ops.listen(
      // A submitter's nudge by creations without a deadline passes for accounts it found full (Nudges.created).
      (target, created) => {
        const onCreated = this.deps.nudges.created;
        if (target === "submitter" && created && onCreated) for (const account of created) onCreated(account, null);
        else this.deps.nudges[target]();
      },
      (taskId, clientId, account) => {
        this.watchers.wake({ taskId, clientId, account });
      },
      // The LISTEN session was lost and is back: what was notified meanwhile was not heard.
      () => this.watchers.resync(),
    );
  }

  /**
   * Answers every request held by Prefer: wait now, with its task as it is, and ends every open
   * event stream (shutdown: a quick HTTP drain; EventSource reconnects to another instance).
   */
  releaseWaits(): void {
    this.watchers.endAll();
  }

  /** Takes over what a previous process left (see start()); separate so tests can run it alone. */
  async recover(): Promise<void> {
    const { store, config, logger } = this.opts;
    const released = await store.ops.recover(destinationHost);
    const sealed = await sealPlainSecrets(this.deps, config.encryptionKey);
    if (released > 0 || sealed > 0)
      logger.info({ leases_released: released, secrets_sealed: sealed }, "recovered state left by a previous process");
  }

  /** Why the relay is not ready: database not writable, or a worker loop stopped or stalled. */
  async problems(): Promise<string[]> {
    const now = this.opts.clock.now();
    const probe = await this.opts.store.ops.probeWrite(now);
    return readinessProblems(probe, this.database.problem(), this.loops, now);
  }

  /** Stops claiming, waits for in-flight work up to the deadline, then releases every lease this process holds. */
  async stop(deadlineMs = 10_000): Promise<void> {
    this.releaseWaits();
    const stopped = Promise.all(this.loops.map((l) => l.stop())).then(() =>
      Promise.all([this.dispatcher.drain(), this.notifier.drain()]),
    );
    await Promise.race([stopped, new Promise((r) => setTimeout(r, deadlineMs).unref())]);
    // Copies still running stop here (a large file may take minutes); whoever claims them next starts again.
    await this.mirror.close();
    await this.durations.flush().catch(() => {});
    this.bucketRows.stop();
    this.leadership.close();
    await this.opts.store.ops.releaseLeases(this.owner.id);
    await this.sender.close();
    await this.closeQueues();
    await this.closeUpstream();
  }
}

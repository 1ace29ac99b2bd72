import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { GaugeCounts, Store } from "./store/store.js";

export interface MetricsSources {
  store: Store;
  /** Reads spent in the last minute and the budget, per account. */
  reads: () => { account: string; used: number; budget: number }[];
}

/**
 * The relay's Prometheus metrics, on a registry of its own (one per Relay, so tests can build many).
 * Counters and histograms are updated where things happen; gauges that mirror the database are
 * computed at scrape time from a few aggregate queries (read once per scrape, before collecting).
 */
export class Metrics {
  readonly registry = new Registry();
  private counts: GaugeCounts = { tasksByStatus: [], tasksByAccountPhase: [], eventsByStatus: [] };
  private readonly store: Store;

  readonly httpRequests = new Counter({
    name: "genrelay_http_requests_total",
    help: "HTTP requests by route, method and status",
    labelNames: ["route", "method", "status"] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: "genrelay_http_request_duration_seconds",
    help: "HTTP request latency by route and method",
    labelNames: ["route", "method"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  readonly upstreamCalls = new Counter({
    name: "genrelay_upstream_calls_total",
    help: "Upstream calls by endpoint (create, read, list, models) and outcome (ok, or the error code)",
    labelNames: ["endpoint", "outcome"] as const,
    registers: [this.registry],
  });
  readonly readsSaved = new Counter({
    name: "genrelay_upstream_reads_saved_total",
    help: "Single task reads avoided because a list read covered the task",
    registers: [this.registry],
  });
  readonly concurrentLimitWaits = new Counter({
    name: "genrelay_upstream_concurrent_limit_waits_total",
    help: "Submissions answered 429 concurrent_limit (the task waits in the relay)",
    registers: [this.registry],
  });
  readonly webhookAttempts = new Counter({
    name: "genrelay_webhook_attempts_total",
    help: "Webhook delivery attempts by outcome (succeeded, failed, blocked)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly deliveryLatency = new Histogram({
    name: "genrelay_webhook_delivery_latency_seconds",
    help: "From an event being written to its successful delivery",
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 7200],
    registers: [this.registry],
  });
  readonly mirrorBytes = new Counter({
    name: "genrelay_mirror_bytes_total",
    help: "Bytes of output files copied into clients' buckets",
    registers: [this.registry],
  });
  readonly mirrorFiles = new Counter({
    name: "genrelay_mirror_files_total",
    help: "Output files by outcome: copied (each copy made), failed (given up on: sent with files[i].error)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  readonly mirrorFailures = new Counter({
    name: "genrelay_mirror_failures_total",
    help: "Failed copy attempts by kind (blocked, redirect, too_large, http, network, stalled, deadline, too_slow, bucket)",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });
  readonly mirrorCopySeconds = new Histogram({
    name: "genrelay_mirror_copy_seconds",
    help: "Time to copy one output file into a bucket (successful copies)",
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600],
    registers: [this.registry],
  });
  readonly workerLag = new Histogram({
    name: "genrelay_worker_lag_seconds",
    help: "How late due rows are claimed, by worker",
    labelNames: ["worker"] as const,
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300],
    registers: [this.registry],
  });

  constructor(sources: MetricsSources) {
    this.store = sources.store;
    const registry = this.registry;
    const counts = () => this.counts;
    new Gauge({
      name: "genrelay_tasks",
      help: "Tasks by status",
      labelNames: ["status"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const s of ["queued", "processing", "succeeded", "failed", "canceled"]) this.set({ status: s }, 0);
        for (const row of counts().tasksByStatus) this.set({ status: row.status }, row.n);
      },
    });
    new Gauge({
      name: "genrelay_upstream_tasks",
      help: "Tasks per upstream account by phase: waiting (in the relay) and in_flight (submitted, not ended)",
      labelNames: ["account", "phase"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const row of counts().tasksByAccountPhase)
          this.set({ account: row.account, phase: row.phase === "submitted" ? "in_flight" : "waiting" }, row.n);
      },
    });
    new Gauge({
      name: "genrelay_deliveries",
      help: "Webhook events by delivery status (pending, failed)",
      labelNames: ["status"] as const,
      registers: [registry],
      collect() {
        this.reset();
        this.set({ status: "pending" }, 0);
        this.set({ status: "failed" }, 0);
        for (const row of counts().eventsByStatus) this.set({ status: row.status }, row.n);
      },
    });
    new Gauge({
      name: "genrelay_upstream_reads_used",
      help: "Upstream task reads spent in the last 60 s, per account",
      labelNames: ["account"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of sources.reads()) this.set({ account: r.account }, r.used);
      },
    });
    new Gauge({
      name: "genrelay_upstream_read_budget",
      help: "Upstream task reads allowed per 60 s, per account (UPSTREAM_READS_PER_MINUTE)",
      labelNames: ["account"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of sources.reads()) this.set({ account: r.account }, r.budget);
      },
    });
    collectDefaultMetrics({ register: registry, prefix: "genrelay_" });
  }

  async exposition(): Promise<{ contentType: string; body: string }> {
    this.counts = await this.store.ops.gauges();
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

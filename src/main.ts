import { serve } from "@hono/node-server";
import type { Server } from "node:http";
import { setFlagsFromString } from "node:v8";
import { systemClock } from "./clock.js";
import { ConfigError, loadConfig, sandboxRefusal, tracingEnabled, type Config } from "./config.js";
import { pgConnectProblem } from "./db/pg/connect-errors.js";
import { takeServerLock } from "./db/sqlite/server-lock.js";
import { openStore } from "./open-store.js";
import { gracefulHttp } from "./http/graceful.js";
import { createLogger, writeLogsNow } from "./logger.js";
import { Relay } from "./relay.js";
import { startSimulator } from "./simulator/server.js";
import { startTelemetry } from "./telemetry/index.js";

/**
 * V8 lets the old generation grow to up to 4× what survived the last full collection before the
 * next one; with 10,000 tasks waiting and 10,000 in flight that is ~120 MB of heap for ~30 MB
 * live. 1.5× keeps the process under 200 MB RSS there, for no measurable CPU (docs/deployment.md,
 * "Memory"). Set here rather than in a start command so `node dist/main.js` gets it too; a
 * --heap-growing-percent given to node wins.
 */
const HEAP_GROWING = "--heap-growing-percent=50";
if (!process.execArgv.some((a) => a.startsWith("--heap-growing-percent"))) setFlagsFromString(HEAP_GROWING);

const SANDBOX_KEY = "sandbox";
/**
 * Shutdown budget, 10 s in all (what `docker stop` waits before SIGKILL): in-flight HTTP requests
 * get up to 5 s, then worker loops up to 5 s to finish their attempts before leases are released.
 */
const HTTP_DRAIN_MS = 5_000;
const WORKER_DRAIN_MS = 5_000;

/** The database actually used, for the start line: the PostgreSQL URL without its password, or the SQLite file. */
function databaseName(config: Config): string {
  if (!config.databaseUrl) return config.databasePath;
  try {
    const u = new URL(config.databaseUrl);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "postgres (DATABASE_URL)";
  }
}

/**
 * Sandbox mode on PostgreSQL: each instance would run its own in-process simulator, so a task
 * submitted by one is unknown to the simulator of the instance that takes its account over (after
 * a kill -9 it stays queued for ever). Refused in one line naming the fix: one simulator for all.
 */
function sharedSandboxRefusal(config: Pick<Config, "databaseUrl" | "upstreamBaseUrl">): string | null {
  if (!config.databaseUrl || config.upstreamBaseUrl) return null;
  return 'DATABASE_URL is set but UPSTREAM_BASE_URL is not: every instance would run its own in-process simulator, and tasks would be stranded when another instance takes them over; run one simulator for all (npm run simulator) and set UPSTREAM_BASE_URL=http://127.0.0.1:8090 and UPSTREAM_API_KEY=sandbox on every instance (docs/deployment.md, "Trying several instances")';
}

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const line of err.problems) process.stderr.write(`genrelay: ${line}\n`);
      process.exit(2);
    }
    throw err;
  }
  const refusal = sandboxRefusal(process.env, config) ?? sharedSandboxRefusal(config);
  if (refusal) {
    process.stderr.write(`genrelay: ${refusal}\n`);
    process.exit(2);
  }
  // Before anything is served or logged: the SDK is loaded only when tracing is on (docs/operations.md, "Tracing").
  const tracing = tracingEnabled(process.env) ? await startTelemetry() : null;
  const logger = createLogger(config.logLevel);
  // A second server on one SQLite file would double every worker: refused, in one line (the CLI is fine).
  const lock = config.databaseUrl ? null : takeServerLock(config.databasePath);
  if (!config.databaseUrl && !lock) {
    process.stderr.write(
      `genrelay: another genrelay server is already using the database ${config.databasePath}; stop it first (the CLI works beside it)\n`,
    );
    process.exit(1);
  }
  if (config.webhookAllowPrivateNetworks) {
    logger.warn(
      "WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: webhooks may go to loopback and private addresses; for development and tests only",
    );
  }
  let store: Awaited<ReturnType<typeof openStore>>;
  try {
    store = await openStore(config);
  } catch (err) {
    const problem = config.databaseUrl ? pgConnectProblem(err, config.databaseUrl, process.env) : null;
    if (!problem) throw err;
    writeLogsNow();
    process.stderr.write(`genrelay: ${problem}\n`);
    process.exit(1);
  }

  let upstream = { baseUrl: config.upstreamBaseUrl ?? "", apiKey: config.upstreamApiKey ?? "" };
  let simulator: Awaited<ReturnType<typeof startSimulator>> | null = null;
  if (!config.upstreamBaseUrl) {
    simulator = await startSimulator({ accounts: [{ apiKey: SANDBOX_KEY }] });
    upstream = { baseUrl: simulator.url, apiKey: SANDBOX_KEY };
    logger.warn(
      { simulator: simulator.url },
      "SANDBOX MODE: UPSTREAM_BASE_URL is not set, so the built-in upstream simulator answers; results are simulated",
    );
  }

  const relay = new Relay({ config, store, clock: systemClock, logger, upstream });
  await relay.start();
  const server = serve(
    { fetch: relay.app.fetch, createServer: relay.createServer, port: config.port, hostname: config.host },
    (info) => {
      logger.info(
        {
          host: config.host,
          port: info.port,
          database: databaseName(config),
          sandbox: simulator !== null,
          tracing: tracing !== null,
        },
        "genrelay listening",
      );
    },
  );
  server.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EADDRINUSE" || err.code === "EACCES") {
      const why = err.code === "EADDRINUSE" ? "is already in use" : "cannot be opened (permission denied)";
      writeLogsNow();
      process.stderr.write(
        `genrelay: port ${config.port} on ${config.host} ${why}; set PORT to another port or stop what holds it\n`,
      );
      process.exit(1);
    }
    logger.fatal({ err }, "HTTP server failed");
    process.exit(1);
  });

  const http = gracefulHttp(server as Server);
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    stopping = true;
    // Requests first, while the database is open: each one in flight gets its answer. The listening
    // socket closes synchronously here, so once the line below is written no connection is accepted.
    // Requests held by Prefer: wait answer at once with their task's state, so they never hold the drain up.
    relay.releaseWaits();
    const drained = http.close(HTTP_DRAIN_MS);
    logger.info({ signal }, "shutting down: no new connections; finishing in-flight requests, then worker claims");
    void (async () => {
      const { forced } = await drained;
      if (forced > 0)
        logger.warn(
          { requests: forced, deadline_ms: HTTP_DRAIN_MS },
          "requests still running at the deadline were cut off",
        );
      await relay.stop(WORKER_DRAIN_MS);
      await simulator?.close();
      await store.close();
      lock?.release();
      // The spans still buffered go out before the process ends.
      await tracing?.shutdown();
      logger.info("stopped");
      process.exit(0);
    })().catch((err: unknown) => {
      logger.fatal({ err }, "shutdown failed");
      process.exit(1);
    });
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

main().catch((err: unknown) => {
  writeLogsNow();
  process.stderr.write(`genrelay: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});

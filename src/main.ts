import { serve } from "@hono/node-server";
import { systemClock } from "./clock.js";
import { ConfigError, loadConfig, type Config } from "./config.js";
import { openDatabase } from "./db/open.js";
import { createLogger } from "./logger.js";
import { Relay } from "./relay.js";
import { startSimulator } from "./simulator/server.js";

const SANDBOX_KEY = "sandbox";

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
  const logger = createLogger(config.logLevel);
  const database = openDatabase(config.databasePath);

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

  const relay = new Relay({ config, database, clock: systemClock, logger, upstream });
  relay.start();
  const server = serve({ fetch: relay.app.fetch, port: config.port, hostname: config.host }, (info) => {
    logger.info({ host: config.host, port: info.port, database: config.databasePath, sandbox: simulator !== null }, "genrelay listening");
  });
  server.on("error", (err) => {
    logger.fatal({ err }, "HTTP server failed");
    process.exit(1);
  });

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, "shutting down: no new requests or claims, finishing in-flight work");
    server.close();
    void (async () => {
      await relay.stop(10_000);
      await simulator?.close();
      database.close();
      logger.info("stopped");
      process.exit(0);
    })();
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

main().catch((err: unknown) => {
  process.stderr.write(`genrelay: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});

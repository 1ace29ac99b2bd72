import { serve } from "@hono/node-server";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { systemClock } from "../../src/clock.js";
import { loadConfig } from "../../src/config.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { silentLogger } from "../../src/logger.js";
import { Relay } from "../../src/relay.js";
import { insert as insertClient } from "../../src/db/sqlite/clients.js";
import { sqliteStore } from "../../src/open-store.js";
import { newClient } from "../../src/services/clients.js";
import { startSimulator } from "../../src/simulator/server.js";
import { expect } from "vitest";

export interface LiveRelay {
  url: string;
  relay: Relay;
  client(name?: string): { id: string; apiKey: string; secret: string };
  close(): Promise<void>;
}

/**
 * The relay as `npm start` runs it in sandbox mode, on a real socket (127.0.0.1, port 0) with its
 * worker loops running on the system clock, against the in-process simulator with short timings.
 * For tests where a real client (a browser) drives it.
 */
export async function startLiveRelay(env: Record<string, string> = {}): Promise<LiveRelay> {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-live-"));
  const config = loadConfig({
    DATABASE_PATH: join(dir, "relay.db"),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    LOG_LEVEL: "silent",
    ...env,
  });
  const simulator = await startSimulator({
    accounts: [{ apiKey: "sandbox" }],
    timings: { imageQueuedMs: 200, imageProcessingMs: 500, videoQueuedMs: 300, videoProcessingMs: 800 },
  });
  const database = openDatabase(config.databasePath);
  const store = sqliteStore(database);
  const relay = new Relay({
    config,
    store,
    clock: systemClock,
    logger: silentLogger,
    upstream: { baseUrl: simulator.url, apiKey: "sandbox" },
  });
  await relay.start();
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: relay.app.fetch, createServer: relay.createServer, port: 0, hostname: "127.0.0.1" }, () =>
      resolve(s as Server),
    ) as Server;
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    relay,
    client(name = "browser") {
      const { row, apiKey, webhookSecret } = newClient(systemClock.now(), { name });
      const client = insertClient(database.db, row);
      return { id: client.id, apiKey, secret: webhookSecret };
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await relay.stop(2_000);
      await simulator.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Creates an image task (p-image, one image) as the client of `apiKey` on the relay at `baseUrl`,
 * with the body's other fields (`prompt`, `callback_url`) from `extra`; expects 201 and answers the task.
 */
export async function createImageTask(
  baseUrl: string,
  apiKey: string,
  idempotencyKey: string,
  extra: Record<string, unknown> = {},
): Promise<{ id: string; status: string } & Record<string, unknown>> {
  const created = await fetch(`${baseUrl}/openapi/v1/images/generations`, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${apiKey}`,
      "Content-Type": "application/json",
      "Idempotency-Key": idempotencyKey,
    },
    body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a fox", count: 1, ...extra }),
  });
  expect(created.status).toBe(201);
  return ((await created.json()) as { data: { id: string; status: string } }).data;
}

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/config.js";
import { openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { silentLogger, type Logger } from "../../src/logger.js";
import { Relay } from "../../src/relay.js";
import { insert as insertClient } from "../../src/db/sqlite/clients.js";
import { sqliteStore } from "../../src/open-store.js";
import { newClient } from "../../src/services/clients.js";
import { transitionIn, type SqliteStore } from "../../src/db/sqlite/store.js";
import { transitionRules } from "../../src/core/transition.js";
import type { NewTaskRow } from "../../src/store/store.js";
import type { Resolver } from "../../src/webhooks/ssrf.js";
import { FakeClock } from "./fake-clock.js";

export const UPSTREAM_URL = "https://upstream.test";
export const UPSTREAM_KEY = "upstream-test-key";

export interface TestRelay {
  relay: Relay;
  database: Database_;
  store: SqliteStore;
  clock: FakeClock;
  config: Config;
  dir: string;
  /** Creates a client and returns its id, API key and webhook secret. */
  client(
    name?: string,
    limits?: { maxWaiting?: number; maxRunning?: number; creditLimit?: number },
  ): { id: string; apiKey: string; secret: string };
  /** app.request with the client's bearer key. */
  request(
    apiKey: string | null,
    path: string,
    init?: RequestInit & { json?: unknown; idempotencyKey?: string },
  ): Promise<Response>;
  close(): Promise<void>;
}

/**
 * A relay on a fresh migrated SQLite file in a temp folder, with a fake clock and no running
 * loops: tests drive the workers with runOnce(). The upstream is UPSTREAM_URL (mock it with msw)
 * unless `upstream` says otherwise.
 */
export function createTestRelay(
  env: Record<string, string> = {},
  opts: {
    upstream?: { baseUrl: string; apiKey: string };
    resolve?: Resolver;
    clock?: FakeClock;
    /** Where the relay logs (default: nowhere). */
    logger?: Logger;
  } = {},
): TestRelay {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-test-"));
  const config = loadConfig({
    DATABASE_PATH: join(dir, "relay.db"),
    UPSTREAM_BASE_URL: UPSTREAM_URL,
    UPSTREAM_API_KEY: UPSTREAM_KEY,
    ...env,
  });
  const database = openDatabase(config.databasePath);
  const clock = opts.clock ?? new FakeClock();
  const store = sqliteStore(database);
  const relay = new Relay({
    config,
    store,
    clock,
    logger: opts.logger ?? silentLogger,
    upstream: opts.upstream ?? { baseUrl: UPSTREAM_URL, apiKey: UPSTREAM_KEY },
    ...(opts.resolve ? { resolve: opts.resolve } : {}),
  });
  return {
    relay,
    database,
    store,
    clock,
    config,
    dir,
    client(name = "test-client", limits = {}) {
      // Synchronous on purpose (tests create clients inline): the row goes straight into the SQLite file.
      const { row, apiKey, webhookSecret } = newClient(clock.now(), {
        name,
        ...limits,
        encryptionKey: config.encryptionKey,
      });
      const client = insertClient(database.db, row);
      return { id: client.id, apiKey, secret: webhookSecret };
    },
    request(apiKey, path, init = {}) {
      const headers = new Headers(init.headers);
      if (apiKey) headers.set("Authorization", `Bearer ${apiKey}`);
      let body = init.body;
      if (init.json !== undefined) {
        headers.set("Content-Type", "application/json");
        body = JSON.stringify(init.json);
      }
      if (init.idempotencyKey) headers.set("Idempotency-Key", init.idempotencyKey);
      return Promise.resolve(relay.app.request(`http://relay.test${path}`, { ...init, headers, body }));
    },
    async close() {
      await relay.stop(1_000);
      // The store commits what its group commits still hold before it closes the database.
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const imageBody = (extra: Record<string, unknown> = {}) => ({
  model: "p-image",
  mode: "generate",
  prompt: "a red fox in snow",
  count: 1,
  ...extra,
});
export const videoBody = (extra: Record<string, unknown> = {}) => ({
  model: "v-video",
  video_mode: "t2v",
  prompt: "waves at night",
  duration: 5,
  ...extra,
});

/** A bucket setting (PUT /openapi/v1/storage) that passes every check, for tests that vary one field. */
export const bucketBody = (extra: Record<string, unknown> = {}) => ({
  endpoint: "https://s3.eu-west-1.amazonaws.com",
  bucket: "outputs",
  region: "eu-west-1",
  access_key_id: "AKIAEXAMPLE",
  secret_access_key: "secret-example",
  ...extra,
});

/** A client written straight into a SQLite database, synchronously (what createClient does through the store). */
export function insertTestClient(
  db: Database_["db"],
  clock: { now(): number },
  input: Parameters<typeof newClient>[1],
) {
  const { row, apiKey, webhookSecret } = newClient(clock.now(), input);
  return { client: insertClient(db, row), apiKey, webhookSecret };
}

/** A task's state change written synchronously, in one transaction, the way the store does it (tests seed states with it). */
export function transitionTask(
  db: Database_["db"],
  task: { id: string },
  patch: Partial<NewTaskRow>,
  opts: { now: number; firstAttemptDelayMs?: number },
) {
  return db.transaction(() =>
    transitionIn(db, transitionRules, task.id, patch, {
      now: opts.now,
      token: null,
      firstAttemptDelayMs: opts.firstAttemptDelayMs ?? 0,
    }),
  );
}

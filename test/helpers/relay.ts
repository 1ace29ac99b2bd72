import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/config.js";
import { MIGRATIONS_FOLDER, openDatabase, type Database_ } from "../../src/db/sqlite/open.js";
import { silentLogger, type Logger } from "../../src/logger.js";
import { Relay } from "../../src/relay.js";
import { insert as insertClient } from "../../src/db/sqlite/clients.js";
import { pgStore, sqliteStore } from "../../src/open-store.js";
import { newClient } from "../../src/services/clients.js";
import { transitionIn, type SqliteStore } from "../../src/db/sqlite/store.js";
import { transitionRules } from "../../src/core/transition.js";
import type { Store } from "../../src/store/store.js";
import type { NewTaskRow } from "../../src/store/rows.js";
import type { Resolver } from "../../src/net/address-guard.js";
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { FakeClock } from "./fake-clock.js";
import { freshPgDatabase } from "./pg.js";
import { emptyStore, type Dialect } from "./store-dialects.js";

export const UPSTREAM_URL = "https://upstream.test";
export const UPSTREAM_KEY = "upstream-test-key";
/**
 * The global fetch, resolved at each call: msw (the fake upstream) patches it and intercepts nothing
 * else, so in-process relays and clients mocked with msw are given it instead of the undici pool.
 */
export const viaGlobalFetch: typeof fetch = (input, init) => globalThis.fetch(input, init);

/** A client's credentials, as the test relays' `client()` returns them. */
export interface TestClient {
  id: string;
  apiKey: string;
  secret: string;
}

type ClientLimits = { maxWaiting?: number; maxRunning?: number; creditLimit?: number };

export interface TestRelayOptions {
  upstream?: { baseUrl: string; apiKey: string };
  resolve?: Resolver;
  clock?: FakeClock;
  /** Where the relay logs (default: nowhere). */
  logger?: Logger;
}

/** What a test relay is on either database. */
interface TestRelayBase {
  relay: Relay;
  clock: FakeClock;
  config: Config;
  dir: string;
  /** app.request with the client's bearer key. */
  request(
    apiKey: string | null,
    path: string,
    init?: RequestInit & { json?: unknown; idempotencyKey?: string },
  ): Promise<Response>;
  close(): Promise<void>;
}

export interface TestRelay extends TestRelayBase {
  database: Database_;
  store: SqliteStore;
  /** Creates a client and returns its id, API key and webhook secret. */
  client(name?: string, limits?: ClientLimits): TestClient;
}

/** A test relay on either database (relayDialects): its store seen through the contract only. */
export interface DialectRelay extends TestRelayBase {
  dialect: Dialect;
  store: Store;
  /** Creates a client through the store and returns its id, API key and webhook secret. */
  client(name?: string, limits?: ClientLimits): Promise<TestClient>;
}

/** The relay over `store`, with the request helper and a close that also closes the store and removes `dir`. */
function relayOver(store: Store, config: Config, dir: string, opts: TestRelayOptions) {
  const clock = opts.clock ?? new FakeClock();
  const relay = new Relay({
    config,
    store,
    clock,
    logger: opts.logger ?? silentLogger,
    upstream: opts.upstream ?? { baseUrl: UPSTREAM_URL, apiKey: UPSTREAM_KEY },
    fetch: viaGlobalFetch,
    ...(opts.resolve ? { resolve: opts.resolve } : {}),
  });
  const base: TestRelayBase = {
    relay,
    clock,
    config,
    dir,
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
  return base;
}

/** The configuration of a test relay: the fake upstream, the database `env` names, then the test's own settings. */
function testConfig(dir: string, env: Record<string, string>): Config {
  return loadConfig({
    DATABASE_PATH: join(dir, "relay.db"),
    UPSTREAM_BASE_URL: UPSTREAM_URL,
    UPSTREAM_API_KEY: UPSTREAM_KEY,
    ...env,
  });
}

let template: string | undefined;

/**
 * A migrated, empty SQLite database, made once per set of migrations and kept in the temp folder
 * under their hash: a cache, as a vitest worker is ended without running its exit listeners, so a
 * file made per process would stay behind anyway. Made in a folder of its own and renamed into
 * place, so a run beside this one never copies half a file.
 */
function migratedTemplate(): string {
  if (template) return template;
  const hash = createHash("sha256");
  for (const file of [
    ...readdirSync(MIGRATIONS_FOLDER)
      .filter((f) => f.endsWith(".sql"))
      .sort(),
    "meta/_journal.json",
  ])
    hash.update(file).update(readFileSync(join(MIGRATIONS_FOLDER, file)));
  const path = join(tmpdir(), `genrelay-migrated-${hash.digest("hex").slice(0, 16)}.db`);
  if (!existsSync(path)) {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-template-"));
    try {
      // Closing the only connection checkpoints the WAL into the file: the file is the whole database.
      openDatabase(join(dir, "relay.db")).close();
      renameSync(join(dir, "relay.db"), path);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  template = path;
  return path;
}

/**
 * Puts a migrated, empty SQLite database at `path` (unless a file is there): a copy of the template.
 * Migrating a new file costs about 30 ms of CPU, a copy about 2 ms, and openDatabase still checks
 * the copy's migrations against migrations/.
 */
function migratedCopy(path: string): void {
  if (!existsSync(path)) copyFileSync(migratedTemplate(), path);
}

/**
 * A relay on a fresh migrated SQLite file in a temp folder, with a fake clock and no running
 * loops: tests drive the workers with runOnce(). The upstream is UPSTREAM_URL (mock it with msw)
 * unless `upstream` says otherwise. relayDialects() gives the same relay on either database.
 */
export function createTestRelay(env: Record<string, string> = {}, opts: TestRelayOptions = {}): TestRelay {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-test-"));
  const config = testConfig(dir, env);
  if (config.databasePath.startsWith(dir)) migratedCopy(config.databasePath);
  const database = openDatabase(config.databasePath);
  const store = sqliteStore(database);
  const base = relayOver(store, config, dir, opts);
  return {
    ...base,
    database,
    store,
    client(name = "test-client", limits = {}) {
      // Synchronous on purpose (tests create clients inline): the row goes straight into the SQLite file.
      const { client, apiKey, webhookSecret } = insertTestClient(database.db, base.clock, {
        name,
        ...limits,
        encryptionKey: config.encryptionKey,
      });
      return { id: client.id, apiKey, secret: webhookSecret };
    },
  };
}

/** Opens a test relay on one database; `env` and `opts` as createTestRelay's. */
export type OpenTestRelay = (env?: Record<string, string>, opts?: TestRelayOptions) => Promise<DialectRelay>;

/**
 * The two drivers as openers of test relays, for suites that run the same tests on both
 * (describe.each), as the store conformance suite does. Call it at the top of a file. Every
 * PostgreSQL relay of the file opens on the file's one database (a copy of the run's template),
 * emptied first: a database per test costs a CREATE DATABASE each. Close each relay after its test.
 */
export function relayDialects(): Array<[Dialect, OpenTestRelay]> {
  let database: ReturnType<typeof freshPgDatabase> | undefined;
  afterAll(async () => {
    const db = database;
    database = undefined;
    if (db) await (await db).drop();
  });
  return [
    [
      "sqlite",
      async (env, opts) => {
        const t = createTestRelay(env, opts);
        return { ...t, dialect: "sqlite", client: async (name, limits) => t.client(name, limits) };
      },
    ],
    [
      "postgres",
      async (env = {}, opts = {}) => {
        database ??= freshPgDatabase();
        const { url } = await database;
        const store = await pgStore(url, { migrate: false, max: 4 });
        await emptyStore(store);
        const dir = mkdtempSync(join(tmpdir(), "genrelay-test-"));
        const config = testConfig(dir, { DATABASE_URL: url, ...env });
        const base = relayOver(store, config, dir, opts);
        return {
          ...base,
          dialect: "postgres",
          store,
          async client(name = "test-client", limits = {}) {
            const { row, apiKey, webhookSecret } = newClient(base.clock.now(), {
              name,
              ...limits,
              encryptionKey: config.encryptionKey,
            });
            const client = await store.clients.insert(row);
            return { id: client.id, apiKey, secret: webhookSecret };
          },
        };
      },
    ],
  ];
}

/** A relay opened by `open` in the `open` hook (handed to `use`, which may also seed it), closed in the `close` hook. */
function relayBetween(
  hooks: [typeof beforeEach, typeof afterEach] | [typeof beforeAll, typeof afterAll],
  open: OpenTestRelay,
  use: (t: DialectRelay) => void | Promise<void>,
): void {
  let current: DialectRelay | undefined;
  hooks[0](async () => {
    current = await open();
    await use(current);
  });
  hooks[1](async () => {
    await current?.close();
    current = undefined;
  });
}

/** For files that keep their relay in a variable of their own: a fresh relay for each test of the calling block. */
export const relayPerTest = (open: OpenTestRelay, use: (t: DialectRelay) => void | Promise<void>) =>
  relayBetween([beforeEach, afterEach], open, use);

/**
 * One relay for every test of the calling block, for tests that change nothing another one reads
 * (refused requests): a relay per test would cost more than the tests.
 */
export const relayPerBlock = (open: OpenTestRelay, use: (t: DialectRelay) => void | Promise<void>) =>
  relayBetween([beforeAll, afterAll], open, use);

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

/**
 * A factory of test relays closed after each test (call it at the top of a test file): the prelude
 * of a cleanup list, an afterEach and a createTestRelay pushed onto it, once.
 */
export function relaysClosedAfterEach(): (env?: Record<string, string>) => TestRelay {
  const open: TestRelay[] = [];
  afterEach(async () => {
    for (const t of open.splice(0).reverse()) await t.close();
  });
  return (env = {}) => {
    const t = createTestRelay(env);
    open.push(t);
    return t;
  };
}

import { loadConfig } from "../../src/config.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { silentLogger } from "../../src/logger.js";
import { pgStore } from "../../src/open-store.js";
import { Relay } from "../../src/relay.js";
import { createSimulator } from "../../src/simulator/app.js";
import { expect } from "vitest";
import { FakeClock } from "./fake-clock.js";
import { freshPgDatabase } from "./pg.js";

export interface UpstreamLog {
  /** Idempotency-Key of every create POST that reached the simulator. */
  creates: string[];
  /** Time (fake clock) of every task read, single or list. */
  reads: number[];
}

/**
 * The sandbox simulator in memory on a fake clock, reached through a fetch that logs creations
 * and reads: what several relay instances did to the upstream, together.
 */
export function simulatedUpstream(
  clock: FakeClock,
  timings = { imageQueuedMs: 2_000, imageProcessingMs: 6_000, videoQueuedMs: 3_000, videoProcessingMs: 20_000 },
) {
  const { app, state } = createSimulator({
    clock,
    accounts: [{ apiKey: "sim-key", readsPerMinute: 120, maxConcurrent: 10_000, balance: Number.MAX_SAFE_INTEGER }],
    timings,
    publicBaseUrl: "http://simulator.local",
  });
  const log: UpstreamLog = { creates: [], reads: [] };
  const fetchImpl: typeof fetch = async (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const method = init?.method ?? "GET";
    if (method === "POST" && /\/generations$/.test(url))
      log.creates.push(new Headers(init?.headers).get("idempotency-key") ?? "");
    if (method === "GET" && /\/openapi\/v1\/tasks(\/|\?|$)/.test(url)) log.reads.push(clock.now());
    return app.request(url, init);
  };
  return { state, log, fetch: fetchImpl };
}

export interface Instance {
  relay: Relay;
  store: PgStore;
  alive: boolean;
}

/** A relay instance on the shared PostgreSQL database, with its own store (pool, leader connection). */
export async function startInstance(
  url: string,
  clock: FakeClock,
  fetchImpl: typeof fetch,
  env: Record<string, string> = {},
): Promise<Instance> {
  const config = loadConfig({
    DATABASE_URL: url,
    UPSTREAM_BASE_URL: "http://simulator.local",
    UPSTREAM_API_KEY: "sim-key",
    UPSTREAM_READS_PER_MINUTE: "100",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_RETRY_SCHEDULE: "0s,1s,2s,5s,10s,30s",
    LOG_LEVEL: "silent",
    ...env,
  });
  const store = await pgStore(url, { migrate: false, max: 4 });
  const relay = new Relay({
    config,
    store,
    clock,
    logger: silentLogger,
    upstream: { baseUrl: "http://simulator.local", apiKey: "sim-key" },
    fetch: fetchImpl,
  });
  await relay.recover();
  return { relay, store, alive: true };
}

/**
 * `count` instances on a fresh database sharing one fake clock and simulated upstream, `env` added
 * to each one's configuration; `stop` crashes the live ones and drops the database.
 */
export async function startInstances(count: number, env: Record<string, string> = {}) {
  const db = await freshPgDatabase();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const instances: Instance[] = [];
  const stop = async () => {
    for (const i of instances) if (i.alive) await crash(i);
    await db.drop();
  };
  try {
    for (let i = 0; i < count; i++) instances.push(await startInstance(db.url, clock, upstream.fetch, env));
  } catch (err) {
    await stop();
    throw err;
  }
  return { db, clock, upstream, instances, stop };
}

/** One round of every live instance's workers, side by side (claims race for real on the database). */
export async function round(instances: Instance[]): Promise<void> {
  const live = instances.filter((i) => i.alive);
  await Promise.all(live.map((i) => i.relay.submitter.runOnce()));
  await Promise.all(live.map((i) => i.relay.poller.runOnce()));
  await Promise.all(live.map((i) => i.relay.dispatcher.runOnce()));
}

/** Dies like a kill -9 would leave it: no lease released, its connections (and so its advisory locks) gone. */
export async function crash(instance: Instance): Promise<void> {
  instance.alive = false;
  await instance.relay.dispatcher.drain();
  await instance.store.close();
}

/** Creates an image task through instance `i`'s app (Idempotency-Key `<keyPrefix>-<n>`): its id. */
export async function createVia(
  i: Instance,
  apiKey: string,
  n: number,
  callbackUrl: string,
  keyPrefix: string,
): Promise<string> {
  const res = await i.relay.app.request("http://relay.test/openapi/v1/images/generations", {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": `${keyPrefix}-${n}`,
    },
    body: JSON.stringify({
      model: "p-image",
      mode: "generate",
      prompt: `task ${n}`,
      count: 1,
      callback_url: callbackUrl,
    }),
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { data: { id: string } }).data.id;
}

/**
 * Two instances on a fresh database with the simulated upstream, for a test that `cleanups` ends
 * (the instances as a crash leaves them, then the database dropped).
 */
export async function startPair(
  cleanups: Array<() => Promise<void>>,
  env: Record<string, string> = {},
): Promise<{
  a: Instance;
  b: Instance;
  clock: FakeClock;
}> {
  const db = await freshPgDatabase();
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const upstream = simulatedUpstream(clock);
  const instances: Instance[] = [];
  cleanups.push(async () => {
    for (const i of instances) if (i.alive) await crash(i);
    await db.drop();
  });
  for (let n = 0; n < 2; n++) instances.push(await startInstance(db.url, clock, upstream.fetch, env));
  const [a, b] = instances as [Instance, Instance];
  return { a, b, clock };
}

/** A request to instance `i`'s app with the client's key (JSON body). */
export const callAs =
  (apiKey: string) =>
  async (i: Instance, path: string, init: RequestInit = {}): Promise<Response> =>
    i.relay.app.request(`http://relay.test${path}`, {
      ...init,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
    });

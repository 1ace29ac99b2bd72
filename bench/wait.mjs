// Prefer: wait (docs/contract.md, "Waiting for the result"): what 1,000 held requests cost, and how
// soon a held request answers after its task's transition.
//
//   node --expose-gc bench/wait.mjs [--held 1000] [--pg]
//
// In process, through the relay's own app (app.request, no sockets): the figures are the relay's
// share of a held request (its promise, timer, hold and the request's objects), not a socket's.
// The relay is built from dist/ (npm run build) on a fresh SQLite file; the transitions are
// cancels, through the same Lifecycle verb the workers use. With --pg, also two relays on one
// PostgreSQL database (embedded, loopback): requests held on one, tasks canceled by the other, so
// each wake travels through NOTIFY/LISTEN.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { loadConfig } from "../dist/config.js";
import { openDatabase } from "../dist/db/sqlite/open.js";
import { silentLogger } from "../dist/logger.js";
import { sqliteStore } from "../dist/open-store.js";
import { HELD_WAITS_PER_CLIENT, Relay } from "../dist/relay.js";
import { createClient } from "../dist/services/clients.js";
import { systemClock } from "../dist/clock.js";
import { pgStore } from "../dist/open-store.js";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const HELD = arg("held", 1000);
const gc = globalThis.gc ?? (() => {});
const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const round = (x, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

const config = (env) =>
  loadConfig({ UPSTREAM_BASE_URL: "http://upstream.invalid", UPSTREAM_API_KEY: "k", LOG_LEVEL: "silent", ...env });
const relayOn = (store, cfg) =>
  new Relay({
    config: cfg,
    store,
    clock: systemClock,
    logger: silentLogger,
    upstream: { baseUrl: "http://upstream.invalid", apiKey: "k" },
  });
const callOf =
  (relay) =>
  (apiKey, path, init = {}) =>
    relay.app.request(`http://relay.bench${path}`, {
      ...init,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
    });
const settle = async () => {
  gc();
  await new Promise((r) => setTimeout(r, 50));
  gc();
};

/** Holds HELD reads on `holder`, measures them, then cancels each task through `canceler` in turn. */
async function measure(holder, canceler, store) {
  const call = callOf(holder);
  // One task per held request, spread over enough clients to stay within the per-client bound.
  const tasks = [];
  for (let c = 0; c < Math.ceil(HELD / HELD_WAITS_PER_CLIENT); c++) {
    const { apiKey, client } = await createClient({ store, clock: systemClock }, { name: `bench-${c}` });
    for (let i = 0; i < HELD_WAITS_PER_CLIENT && tasks.length < HELD; i++) {
      const res = await call(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `bench-${c}-${i}` },
        body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a fox", count: 1 }),
      });
      tasks.push({ apiKey, clientId: client.id, id: (await res.json()).data.id });
    }
  }
  await settle();
  // The same idle second before any request is held: what the process spends anyway.
  const baseStart = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpuBase = process.cpuUsage(baseStart);
  await settle();
  const heapBefore = process.memoryUsage().heapUsed;
  const rssBefore = process.memoryUsage().rss;
  const cpuBefore = process.cpuUsage();
  const answered = new Map();
  const pending = tasks.map((t) =>
    call(t.apiKey, `/openapi/v1/tasks/${t.id}?status=queued`, { headers: { Prefer: "wait=60" } }).then(async (res) => {
      await res.json();
      answered.set(t.id, performance.now());
    }),
  );
  // Held: every request has read its task and waits for a wake-up, nothing in flight.
  while (holder.waiters.parked < HELD) await new Promise((r) => setImmediate(r));
  const cpuHold = process.cpuUsage(cpuBefore);
  await settle();
  const heapHeld = process.memoryUsage().heapUsed;
  const rssHeld = process.memoryUsage().rss;
  // While held: CPU over one idle second (nothing polls).
  const idleStart = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpuIdle = process.cpuUsage(idleStart);

  // Wake-up latency: from the transition's commit (the cancel verb returned) to the held answer read.
  const latency = [];
  for (const [i, t] of tasks.entries()) {
    await canceler.lifecycle.cancelIf(t.id, t.clientId, () => true);
    const committed = performance.now();
    await pending[i];
    latency.push(answered.get(t.id) - committed);
  }
  latency.sort((a, b) => a - b);
  return {
    held: HELD,
    heap_bytes_per_held_request: Math.round((heapHeld - heapBefore) / HELD),
    rss_bytes_per_held_request: Math.round((rssHeld - rssBefore) / HELD),
    cpu_us_per_request_to_hold: round((cpuHold.user + cpuHold.system) / HELD, 1),
    cpu_ms_per_idle_second_before: round((cpuBase.user + cpuBase.system) / 1000, 2),
    cpu_ms_per_idle_second_while_held: round((cpuIdle.user + cpuIdle.system) / 1000, 2),
    commit_to_answer_ms: { p50: round(pct(latency, 50), 3), p95: round(pct(latency, 95), 3) },
  };
}

const results = { gc_exposed: globalThis.gc !== undefined };
{
  const dir = mkdtempSync(join(os.tmpdir(), "genrelay-wait-bench-"));
  const cfg = config({ DATABASE_PATH: join(dir, "relay.db") });
  const store = sqliteStore(openDatabase(cfg.databasePath));
  const relay = relayOn(store, cfg);
  results.sqlite_same_instance = await measure(relay, relay, store);
  await relay.stop(1000);
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
if (process.argv.includes("--pg")) {
  const { startPostgres } = await import("./postgres.mjs");
  const server = await startPostgres();
  const url = await server.database("wait");
  const cfg = config({ DATABASE_URL: url });
  const storeA = await pgStore(url, { max: 4 });
  const storeB = await pgStore(url, { migrate: false, max: 4 });
  const [a, b] = [relayOn(storeA, cfg), relayOn(storeB, cfg)];
  await a.listen();
  results.postgres_other_instance = await measure(a, b, storeA);
  await a.stop(1000);
  await b.stop(1000);
  await storeA.close();
  await storeB.close();
  await server.stop();
}
console.log(JSON.stringify(results, null, 2));

// Live progress (docs/contract.md, "Live progress"): what 1,000 open event streams cost, and how
// soon a stream shows its task's transition.
//
//   node --expose-gc bench/streams.mjs [--streams 1000] [--pg]
//
// In process, through the relay's own app (app.request, no sockets): the figures are the relay's
// share of an open stream (its subscription, the SSE writer, the response's objects), not a
// socket's. The relay is built from dist/ (npm run build) on a fresh SQLite file; each stream is
// read by this script as a browser would. The transitions are cancels, through the same Lifecycle
// verb the workers use. With --pg, also two relays on one PostgreSQL database (embedded, loopback):
// streams open on one, tasks canceled by the other, so each wake travels through NOTIFY/LISTEN.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { loadConfig } from "../dist/config.js";
import { openDatabase } from "../dist/db/sqlite/open.js";
import { silentLogger } from "../dist/logger.js";
import { pgStore, sqliteStore } from "../dist/open-store.js";
import { Relay } from "../dist/relay.js";
import { createClient } from "../dist/services/clients.js";
import { STREAMS_PER_CLIENT } from "../dist/services/streams.js";
import { systemClock } from "../dist/clock.js";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const STREAMS = arg("streams", 1000);
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

/** Reads a stream as EventSource would, resolving `ended` with the time its terminal event arrived. */
function follow(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  return (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return null;
      text += decoder.decode(value, { stream: true });
      if (text.includes("event: task.canceled")) {
        const at = performance.now();
        await reader.cancel();
        return at;
      }
    }
  })();
}

/** Opens STREAMS task streams on `host`, measures them, then cancels each task through `canceler` in turn. */
async function measure(host, canceler, store) {
  const call = callOf(host);
  const tasks = [];
  for (let c = 0; c < Math.ceil(STREAMS / STREAMS_PER_CLIENT); c++) {
    const { apiKey, client } = await createClient({ store, clock: systemClock }, { name: `bench-${c}` });
    for (let i = 0; i < STREAMS_PER_CLIENT && tasks.length < STREAMS; i++) {
      const res = await call(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `bench-${c}-${i}` },
        body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a fox", count: 1 }),
      });
      tasks.push({ apiKey, clientId: client.id, id: (await res.json()).data.id });
    }
  }
  await settle();
  const baseStart = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpuBase = process.cpuUsage(baseStart);
  await settle();
  const heapBefore = process.memoryUsage().heapUsed;
  const rssBefore = process.memoryUsage().rss;
  const cpuBefore = process.cpuUsage();
  const ended = [];
  for (const t of tasks) ended.push(follow(await call(t.apiKey, `/openapi/v1/tasks/${t.id}/events`)));
  // Open: every stream has read its task, sent its progress and waits for a change.
  while (host.streams.parked < STREAMS) await new Promise((r) => setImmediate(r));
  const cpuOpen = process.cpuUsage(cpuBefore);
  await settle();
  const heapOpen = process.memoryUsage().heapUsed;
  const rssOpen = process.memoryUsage().rss;
  const idleStart = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 1000));
  const cpuIdle = process.cpuUsage(idleStart);

  const latency = [];
  for (const [i, t] of tasks.entries()) {
    await canceler.lifecycle.cancelIf(t.id, t.clientId, () => true);
    const committed = performance.now();
    latency.push((await ended[i]) - committed);
  }
  latency.sort((a, b) => a - b);
  return {
    streams: STREAMS,
    heap_bytes_per_open_stream: Math.round((heapOpen - heapBefore) / STREAMS),
    rss_bytes_per_open_stream: Math.round((rssOpen - rssBefore) / STREAMS),
    cpu_us_per_stream_to_open: round((cpuOpen.user + cpuOpen.system) / STREAMS, 1),
    cpu_ms_per_idle_second_before: round((cpuBase.user + cpuBase.system) / 1000, 2),
    cpu_ms_per_idle_second_while_open: round((cpuIdle.user + cpuIdle.system) / 1000, 2),
    commit_to_stream_event_ms: { p50: round(pct(latency, 50), 3), p95: round(pct(latency, 95), 3) },
  };
}

const results = { gc_exposed: globalThis.gc !== undefined, load_average: os.loadavg().map((l) => round(l)) };
{
  const dir = mkdtempSync(join(os.tmpdir(), "genrelay-streams-bench-"));
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
  const url = await server.database("streams");
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

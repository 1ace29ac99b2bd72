// Prefer: wait (docs/contract.md, "Waiting for the result"): what 1,000 held requests cost, and how
// soon a held request answers after its task's transition.
//
//   node --expose-gc bench/wait.mjs [--held 1000]
//
// In process, through the relay's own app (app.request, no sockets): the figures are the relay's
// share of a held request (its promise, timer, hold and the request's objects), not a socket's.
// The relay is built from dist/ (npm run build) on a fresh SQLite file; the transitions are
// cancels, through the same Lifecycle verb the workers use.
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

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const HELD = arg("held", 1000);
const gc = globalThis.gc ?? (() => {});
const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const round = (x, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

const dir = mkdtempSync(join(os.tmpdir(), "genrelay-wait-bench-"));
const config = loadConfig({
  DATABASE_PATH: join(dir, "relay.db"),
  UPSTREAM_BASE_URL: "http://upstream.invalid",
  UPSTREAM_API_KEY: "k",
  LOG_LEVEL: "silent",
});
const store = sqliteStore(openDatabase(config.databasePath));
const relay = new Relay({
  config,
  store,
  clock: systemClock,
  logger: silentLogger,
  upstream: { baseUrl: "http://upstream.invalid", apiKey: "k" },
});
const call = (apiKey, path, init = {}) =>
  relay.app.request(`http://relay.bench${path}`, {
    ...init,
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
  });

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

gc();
await new Promise((r) => setTimeout(r, 50));
gc();
const heapBefore = process.memoryUsage().heapUsed;
const rssBefore = process.memoryUsage().rss;
const cpuBefore = process.cpuUsage();
const answered = new Map();
const pending = tasks.map((t) =>
  call(t.apiKey, `/openapi/v1/tasks/${t.id}?status=queued`, { headers: { Prefer: "wait=60" } }).then(async (res) => {
    await res.json();
    answered.set(t.id, performance.now());
    return res;
  }),
);
while (relay.waiters.size < HELD || tasks.some((t) => relay.waiters.watchers(t.id) === 0))
  await new Promise((r) => setImmediate(r));
const cpuHold = process.cpuUsage(cpuBefore);
gc();
await new Promise((r) => setTimeout(r, 50));
gc();
const heapHeld = process.memoryUsage().heapUsed;
const rssHeld = process.memoryUsage().rss;
// While held: CPU over one idle second (nothing polls).
const idleStart = process.cpuUsage();
await new Promise((r) => setTimeout(r, 1000));
const cpuIdle = process.cpuUsage(idleStart);

// Wake-up latency: each task canceled in turn; from the transition's commit (the wake) to the answer read.
const woke = new Map();
const wake = relay.waiters.wake.bind(relay.waiters);
relay.waiters.wake = (id) => {
  woke.set(id, performance.now());
  wake(id);
};
const fromWake = [];
const fromCancel = [];
for (const t of tasks) {
  const start = performance.now();
  await relay.lifecycle.cancelIf(t.id, t.clientId, () => true);
  await pending[tasks.indexOf(t)];
  fromWake.push(answered.get(t.id) - woke.get(t.id));
  fromCancel.push(answered.get(t.id) - start);
}
fromWake.sort((a, b) => a - b);
fromCancel.sort((a, b) => a - b);

const result = {
  held: HELD,
  heap_bytes_per_held_request: Math.round((heapHeld - heapBefore) / HELD),
  rss_bytes_per_held_request: Math.round((rssHeld - rssBefore) / HELD),
  cpu_us_per_request_to_hold: round((cpuHold.user + cpuHold.system) / HELD, 1),
  cpu_ms_idle_second_while_held: round((cpuIdle.user + cpuIdle.system) / 1000, 2),
  wake_to_answer_ms: { p50: round(pct(fromWake, 50), 3), p95: round(pct(fromWake, 95), 3) },
  cancel_call_to_answer_ms: { p50: round(pct(fromCancel, 50), 3), p95: round(pct(fromCancel, 95), 3) },
  gc_exposed: globalThis.gc !== undefined,
};
console.log(JSON.stringify(result, null, 2));
await relay.stop(1000);
await store.close();
rmSync(dir, { recursive: true, force: true });

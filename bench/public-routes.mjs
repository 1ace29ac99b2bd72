// Public routes (issue #38 item 4, #43): what one request without an API key costs the relay, and
// what a flood of them does to a paying client, on this build and on an older one in the same run.
//
//   node bench/public-routes.mjs            (BENCH_QUICK=1: a small run of this build alone;
//                                             BENCH_PUBLIC_OLD_DIST=<dist>, default /work/base/dist
//                                             when it exists and the run is not quick: the old build)
//
// Per build, per round (the builds' order rotated each round):
//   - CPU per request of GET /openapi/v1/webhooks/jwks/{id} and GET /files/{token} (302), from the
//     relay's /proc/<pid>/stat, spread over loopback source addresses (127.0.0.x) so that no address
//     passes the per-address limit: the cost of a served request, not of a refusal;
//   - CPU per refused request (one address past its limit; on a build without the limit these are
//     served, and cost what a served one does);
//   - a victim's completion->webhook latency (receiver arrival - the webhook's completed_at) and its
//     authenticated reads, without and then with FLOOD anonymous requests from one address.
// Medians over the rounds; the load average is recorded at the start and end.
import { Agent, request } from "node:http";
import Database from "better-sqlite3";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { BENCH, cpuMsOf, ipcChild, startLoopbackRelay, startSimulator } from "./lib/proc.mjs";
import { DIST, distImport } from "./lib/dist.mjs";
import { median, round } from "./lib/stats.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const KEY = Buffer.alloc(32, 7).toString("base64");

const loadNow = () => os.loadavg().map((x) => round(x, 2));

/**
 * A keep-alive client whose connections come from `localAddress` (node:http: undici's Pool ignores
 * a local address), answering each GET with its status once the body is read.
 */
function clientFrom(url, localAddress, connections) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections, localAddress });
  const get = (path) =>
    new Promise((resolve, reject) => {
      const req = request(`${url}${path}`, { agent }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode));
      });
      req.on("error", reject);
      req.end();
    });
  return { get, close: () => agent.destroy() };
}

/** `count` GETs of `path` through `client`, 4 at a time, added to `statuses`. */
async function getMany(client, path, count, statuses = {}) {
  await Promise.all(
    Array.from({ length: 4 }, async (_, w) => {
      for (let i = w; i < count; i += 4) {
        const status = await client.get(path);
        statuses[status] = (statuses[status] ?? 0) + 1;
      }
    }),
  );
  return statuses;
}

/** Loopback source addresses not used yet (127.0.0.2 to 127.0.0.249, then the next /24): each starts within its limit. */
let nextAddress = 2;
const freshAddress = () => {
  const a = nextAddress++;
  return `127.0.${Math.floor(a / 248)}.${2 + (a % 248)}`;
};

/** `n` GETs of `path`, `perAddress` from each fresh loopback source address in turn, 4 at a time per address. */
async function spread(url, path, n, perAddress) {
  const statuses = {};
  for (let sent = 0; sent < n; ) {
    const client = clientFrom(url, freshAddress(), 4);
    const batch = Math.min(perAddress, n - sent);
    await getMany(client, path, batch, statuses);
    client.close();
    sent += batch;
  }
  return statuses;
}

/** CPU ms of the relay per request of `path` over `n` requests. */
async function cpuPerRequest(relay, path, n, perAddress) {
  const before = cpuMsOf(relay.pid);
  const statuses = await spread(relay.url, path, n, perAddress);
  return { ms: (cpuMsOf(relay.pid) - before) / n, statuses };
}

/** CPU ms per request of one address that has already sent 200 (the new build's limit per 10 s) within the window. */
async function refusedCost(b, n) {
  const client = clientFrom(b.relay.url, freshAddress(), 4);
  await getMany(client, b.jwksPath, 200);
  const before = cpuMsOf(b.relay.pid);
  const statuses = await getMany(client, b.jwksPath, n);
  const ms = (cpuMsOf(b.relay.pid) - before) / n;
  client.close();
  return { ms, statuses };
}

async function api(url, apiKey, path, init = {}) {
  const res = await fetch(`${url}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${init.method ?? "GET"} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A relay of `dist` with a victim client, an ed25519 client and one file link, ready to measure. */
async function setUp(dist, tmp, sim, name) {
  const {
    relay,
    clients: { victim, keys },
    databasePath,
  } = await startLoopbackRelay({
    dist,
    tmp,
    name,
    upstreamUrl: sim.url,
    clients: ["victim", "keys"],
    // The default level: a request's log line is part of what it costs.
    env: { RELAY_ENCRYPTION_KEY: KEY, PUBLIC_BASE_URL: "http://relay.bench", LOG_LEVEL: "info" },
  });
  await api(relay.url, keys.api_key, "/openapi/v1/webhooks/settings", {
    method: "PUT",
    body: JSON.stringify({ signature: "ed25519" }),
  });
  const created = await api(relay.url, keys.api_key, "/openapi/v1/images/generations", {
    method: "POST",
    headers: { "idempotency-key": `files-${name}` },
    body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a file to link", count: 1 }),
  });
  const taskId = created.data.id;
  // Ended before the bucket is set, so the mirror never copies it, and nothing rewrites the files
  // recorded below.
  for (let i = 0; ; i++) {
    const task = await api(relay.url, keys.api_key, `/openapi/v1/tasks/${taskId}`);
    if (["succeeded", "failed", "canceled"].includes(task.data.status)) break;
    if (i > 600) throw new Error(`${name}: the file link's task did not end: ${JSON.stringify(task.data)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await api(relay.url, keys.api_key, "/openapi/v1/storage", {
    method: "PUT",
    body: JSON.stringify({
      endpoint: "http://127.0.0.1:9",
      bucket: "outputs",
      region: "us-east-1",
      access_key_id: "AKIABENCH",
      secret_access_key: "bench-secret",
      force_path_style: true,
    }),
  });
  // The copy as the mirror records it (no bucket needed: presigning opens no socket).
  const db = new Database(databasePath);
  const files = [{ url: "https://upstream.example/a.png", key: `gen/${taskId}/0.png`, sha256: "00", bytes: 1 }];
  db.prepare("UPDATE tasks SET files_json = ? WHERE id = ?").run(JSON.stringify(files), taskId);
  const { storage_config } = db.prepare("SELECT storage_config FROM clients WHERE id = ?").get(keys.id);
  db.close();
  const { openLinkKey } = await distImport("mirror/stored-bucket.js");
  const { linkToken } = await distImport("mirror/links.js");
  const linkKey = openLinkKey({ storageConfig: storage_config }, Buffer.from(KEY, "base64"));
  const token = linkToken(linkKey, taskId, 0);
  const filePath = `/files/${token}`;
  const check = await fetch(`${relay.url}${filePath}`, { redirect: "manual" });
  if (check.status !== 302) throw new Error(`${name}: file link answered ${check.status}: ${await check.text()}`);
  return { relay, victim, jwksPath: `/openapi/v1/webhooks/jwks/${keys.id}`, filePath };
}

/** The victim's tasks, one at a time: completion->webhook per task, and its reads' statuses meanwhile. */
async function victimRun(b, receiver, tasks, tag) {
  await receiver.call("reset", { parse: true });
  const reads = {};
  for (let i = 0; i < tasks; i++) {
    await api(b.relay.url, b.victim.api_key, "/openapi/v1/images/generations", {
      method: "POST",
      headers: { "idempotency-key": `victim-${tag}-${i}` },
      body: JSON.stringify({
        model: "p-image",
        mode: "generate",
        prompt: `victim ${i}`,
        count: 1,
        callback_url: `${await receiver.call("address")}/hook`,
      }),
    });
    const res = await fetch(`${b.relay.url}/openapi/v1/tasks`, {
      headers: { authorization: `Bearer ${b.victim.api_key}` },
    });
    await res.arrayBuffer();
    reads[res.status] = (reads[res.status] ?? 0) + 1;
    await receiver.call("waitFor", { count: i + 1, timeoutMs: 30_000 });
  }
  const latencies = (await receiver.call("latencies")).map(([at, , completed]) => at - completed);
  return { median_ms: median(latencies), max_ms: Math.max(...latencies), n: latencies.length, reads };
}

/** FLOOD anonymous requests from one address (127.1.0.1), 32 at a time, JWKS and file links alternating. */
function flood(b, n) {
  const client = clientFrom(b.relay.url, "127.1.0.1", 32);
  const statuses = {};
  let sent = 0;
  return Promise.all(
    Array.from({ length: 32 }, async () => {
      while (sent < n) {
        const status = await client.get(sent++ % 2 ? b.jwksPath : b.filePath);
        statuses[status] = (statuses[status] ?? 0) + 1;
      }
    }),
  ).then(() => {
    client.close();
    return statuses;
  });
}

export async function benchPublicRoutes({ log = console.log, rounds = QUICK ? 1 : 3 } = {}) {
  // A quick run (the smoke test's) measures this build only, unless an old one is named.
  const oldDist =
    process.env.BENCH_PUBLIC_OLD_DIST ?? (!QUICK && existsSync("/work/base/dist/main.js") ? "/work/base/dist" : null);
  const builds = [["new", DIST], ...(oldDist ? [["old", oldDist]] : [])];
  const n = QUICK ? 100 : 3000;
  const floodN = QUICK ? 400 : 10_000;
  // Quick (the smoke run): one victim task per phase, each waits a poll of the upstream in real time.
  const victimTasks = QUICK ? 1 : 15;
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-public-"));
  const loadStart = loadNow();
  const sim = await startSimulator(
    {
      SIM_IMAGE_QUEUED_MS: 0,
      SIM_IMAGE_PROCESSING_MS: 50,
      SIM_IMAGE_PROCESSING_MAX_MS: 50,
      SIM_MAX_CONCURRENT: 100_000,
      SIM_READS_PER_MINUTE: 0,
    },
    join(tmp, "sim.log"),
  );
  const receiver = ipcChild("receiver", join(BENCH, "receiver.mjs"), join(tmp, "receiver.log"));
  await receiver.waitFor(/listening/);
  const per = Object.fromEntries(builds.map(([name]) => [name, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 ? [...builds].reverse() : builds;
      for (const [name, dist] of order) {
        const b = await setUp(dist, tmp, sim, `${name}-${r}`);
        try {
          // Warm-up: the first requests load code paths and fill caches.
          await spread(b.relay.url, b.jwksPath, 100, 100);
          await spread(b.relay.url, b.filePath, 100, 100);
          const jwks = await cpuPerRequest(b.relay, b.jwksPath, n, 150);
          const file = await cpuPerRequest(b.relay, b.filePath, n, 150);
          const refused = await refusedCost(b, n);
          const quiet = await victimRun(b, receiver, victimTasks, `${r}-quiet`);
          const flooding = flood(b, floodN);
          const loud = await victimRun(b, receiver, victimTasks, `${r}-flood`);
          const floodStatuses = await flooding;
          const row = { jwks, file, refused, quiet, loud, flood: floodStatuses };
          per[name].push(row);
          log(
            `  ${name} round ${r + 1}: JWKS ${round(jwks.ms, 3)} ms CPU/request ${JSON.stringify(jwks.statuses)}, file link ${round(file.ms, 3)} ${JSON.stringify(file.statuses)}, one address past its limit ${round(refused.ms, 3)} ${JSON.stringify(refused.statuses)}; victim completion->webhook median ${quiet.median_ms} ms alone, ${loud.median_ms} ms under ${floodN} anonymous requests ${JSON.stringify(floodStatuses)} (victim reads ${JSON.stringify(loud.reads)})`,
          );
        } finally {
          await b.relay.stop();
        }
      }
    }
  } finally {
    await receiver.stop();
    await sim.stop();
    if (!process.env.BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
  }
  const summary = (rows) => ({
    jwks_cpu_ms: round(median(rows.map((x) => x.jwks.ms)), 3),
    file_cpu_ms: round(median(rows.map((x) => x.file.ms)), 3),
    refused_cpu_ms: round(median(rows.map((x) => x.refused.ms)), 3),
    victim_ms_alone: median(rows.map((x) => x.quiet.median_ms)),
    victim_ms_flood: median(rows.map((x) => x.loud.median_ms)),
    flood_statuses: rows.at(-1)?.flood,
    victim_reads_flood: rows.at(-1)?.loud.reads,
  });
  const result = {
    rounds,
    requests: n,
    flood: floodN,
    victim_tasks: victimTasks,
    load_average: { start: loadStart, end: loadNow() },
    old_dist: oldDist,
    ...Object.fromEntries(Object.entries(per).map(([name, rows]) => [name, summary(rows)])),
  };
  if (result.old) {
    result.jwks_ratio = round(result.new.jwks_cpu_ms / result.old.jwks_cpu_ms, 3);
    result.file_ratio = round(result.new.file_cpu_ms / result.old.file_cpu_ms, 3);
  }
  return result;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const result = await benchPublicRoutes();
  console.log(JSON.stringify(result, null, 2));
}

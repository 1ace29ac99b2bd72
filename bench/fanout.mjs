// Endpoint fan-out (docs/contract.md, "Endpoints"): delivery throughput when each event of a client's
// tasks goes to 1, 3 or 10 endpoints, each its own destination (own host, attempts and breaker).
//
//   npm run build && node bench/fanout.mjs [--tasks 400] [--fanout 1,3,10]
//
// The relay runs in this process from dist/ (or BENCH_DIST) on a fresh SQLite file, with its dispatcher loop only.
// For each fan-out E: one client, E endpoints (each a loopback receiver on its own port, in a
// forked child process, so its CPU is not counted), `tasks` waiting tasks canceled through the API
// while the dispatcher is stopped (each cancel writes task.canceled and its E endpoint rows), then
// the dispatcher is started and timed until every webhook (tasks × E) has arrived. Reported:
// webhooks/s from the start to the last arrival, and the relay process's CPU (user + system) per
// webhook delivered over the same span.
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import os from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { distImport } from "./lib/dist.mjs";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};

// ---- child: E receivers answering 200, counting arrivals --------------------------------------
if (process.argv.includes("--receivers")) {
  const n = Number(arg("receivers", "1"));
  let arrivals = 0;
  const ids = new Set();
  const ports = [];
  for (let i = 0; i < n; i++) {
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        arrivals += 1;
        ids.add(req.headers["webhook-id"]);
        res.writeHead(200, { "content-length": "0" }).end();
      });
    });
    server.keepAliveTimeout = 60_000;
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    ports.push(server.address().port);
  }
  process.on("message", (m) => {
    if (m === "count") process.send({ arrivals, ids: ids.size });
    if (m === "exit") process.exit(0);
  });
  process.send({ ports });
} else {
  await main();
}

async function main() {
  const { loadConfig } = await distImport("config.js");
  const { openDatabase } = await distImport("db/sqlite/open.js");
  const { silentLogger } = await distImport("logger.js");
  const { sqliteStore } = await distImport("open-store.js");
  const { Relay } = await distImport("relay.js");
  const { createClient } = await distImport("services/clients.js");
  const { systemClock } = await distImport("clock.js");

  const TASKS = Number(arg("tasks", "400"));
  // 0: no endpoint, the task's own callback_url instead (the same one receiver): the baseline.
  const FANOUT = arg("fanout", "0,1,3,10").split(",").map(Number);
  const rows = [];
  for (const e of FANOUT) rows.push(await run(e));
  console.log(
    `\nfan-out: ${TASKS} task.canceled events, each to E endpoints (one host each), SQLite, ${os.cpus().length} cores`,
  );
  console.log("| endpoints | webhooks | seconds | webhooks/s | CPU-ms per webhook |");
  console.log("|---:|---:|---:|---:|---:|");
  for (const r of rows)
    console.log(
      `| ${r.endpoints || "0 (callback_url)"} | ${r.webhooks} | ${r.seconds.toFixed(2)} | ${Math.round(r.rate)} | ${r.cpuMs.toFixed(3)} |`,
    );

  async function run(endpoints) {
    const child = fork(fileURLToPath(import.meta.url), ["--receivers", String(Math.max(1, endpoints))], {
      stdio: "inherit",
    });
    const ask = (m) => new Promise((resolve) => child.once("message", resolve) && child.send(m));
    const { ports } = await new Promise((resolve) => child.once("message", resolve));
    const dir = mkdtempSync(join(os.tmpdir(), "genrelay-fanout-"));
    const config = loadConfig({
      DATABASE_PATH: join(dir, "relay.db"),
      UPSTREAM_BASE_URL: "http://upstream.invalid",
      UPSTREAM_API_KEY: "k",
      LOG_LEVEL: "silent",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    });
    const store = sqliteStore(openDatabase(config.databasePath));
    const relay = new Relay({
      config,
      store,
      clock: systemClock,
      logger: silentLogger,
      upstream: { baseUrl: "http://upstream.invalid", apiKey: "k" },
    });
    const { apiKey } = await createClient({ store, clock: systemClock }, { name: `fanout-${endpoints}` });
    const call = (path, init = {}) =>
      relay.app.request(`http://relay.bench${path}`, {
        ...init,
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...init.headers },
      });
    const callback = endpoints === 0 ? { callback_url: `http://127.0.0.1:${ports[0]}/hook` } : {};
    for (const port of endpoints === 0 ? [] : ports) {
      const res = await call("/openapi/v1/webhooks/endpoints", {
        method: "POST",
        body: JSON.stringify({ url: `http://127.0.0.1:${port}/hook`, events: ["task.canceled"] }),
      });
      if (res.status !== 201) throw new Error(`endpoint: ${res.status} ${await res.text()}`);
    }
    // Tasks without callback_url, canceled while they wait (no loop runs yet): every event is written
    // before the measurement starts.
    for (let i = 0; i < TASKS; i++) {
      const created = await call("/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `fanout-${endpoints}-${i}` },
        body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a fox", count: 1, ...callback }),
      });
      if (created.status !== 201) throw new Error(`create: ${created.status} ${await created.text()}`);
      const { id } = (await created.json()).data;
      const canceled = await call(`/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
      if (canceled.status !== 200) throw new Error(`cancel: ${canceled.status} ${await canceled.text()}`);
    }
    const expected = TASKS * Math.max(1, endpoints);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    relay.loops.find((l) => l.name === "dispatcher").start();
    let got = { arrivals: 0 };
    while (got.arrivals < expected) {
      await new Promise((r) => setTimeout(r, 20));
      got = await ask("count");
      if (performance.now() - t0 > 120_000) throw new Error(`only ${got.arrivals} of ${expected} arrived`);
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    await relay.stop(2_000);
    await store.close();
    child.send("exit");
    rmSync(dir, { recursive: true, force: true });
    if (got.ids !== TASKS) throw new Error(`${got.ids} webhook-ids for ${TASKS} events`);
    return {
      endpoints,
      webhooks: got.arrivals,
      seconds,
      rate: got.arrivals / seconds,
      cpuMs: (cpu.user + cpu.system) / 1000 / got.arrivals,
    };
  }
}

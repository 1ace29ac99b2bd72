/**
 * Issue #22, item 3, measured: one task whose upstream read answers a 50 MB body (a loopback
 * upstream streaming it), on a SQLite relay with the default UPSTREAM_MAX_BODY_BYTES. Prints RSS
 * before and after (peak sampled every 5 ms) and how much the database file grew.
 *
 *   npx tsx scripts/big-upstream-read.ts [MiB=50]
 */
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../src/config.js";
import { openDatabase } from "../src/db/sqlite/open.js";
import { silentLogger } from "../src/logger.js";
import { sqliteStore } from "../src/open-store.js";
import { Relay } from "../src/relay.js";
import { newClient } from "../src/services/clients.js";

const MiB = 1024 * 1024;
const total = Number(process.argv[2] ?? 50) * MiB;
let written = 0;
const upstream = createServer((req, res) => {
  if (req.method === "POST") {
    res.writeHead(201, { "Content-Type": "application/json" });
    return void res.end(JSON.stringify({ data: { id: "big_1", status: "queued" } }));
  }
  res.writeHead(200, { "Content-Type": "application/json" });
  res.write('{"data":{"id":"big_1","status":"succeeded"},"usage":{"points_charged":20},"output":{"text":"');
  const chunk = Buffer.alloc(64 * 1024, "a");
  const pump = () => {
    while (written < total) {
      written += chunk.length;
      if (!res.write(chunk)) return void res.once("drain", pump);
    }
    res.end('"}}');
  };
  pump();
});
await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

const dir = mkdtempSync(join(tmpdir(), "genrelay-big-"));
const file = join(dir, "relay.db");
const config = loadConfig({ DATABASE_PATH: file, UPSTREAM_BASE_URL: base, UPSTREAM_API_KEY: "k" });
const store = sqliteStore(openDatabase(file));
let t = Date.now();
const clock = { now: () => t };
const relay = new Relay({ config, store, clock, logger: silentLogger, upstream: { baseUrl: base, apiKey: "k" } });
const { row, apiKey } = newClient(t, { name: "c" });
await store.clients.insert(row);
const res = await relay.app.request("http://relay/openapi/v1/images/generations", {
  method: "POST",
  headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json", "Idempotency-Key": "big-read-1" },
  body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a plain prompt", count: 1 }),
});
const id = ((await res.json()) as { data: { id: string } }).data.id;
await relay.submitter.runOnce();
globalThis.gc?.();
const rssBefore = process.memoryUsage().rss;
// The database and its write-ahead log together.
const dbSize = () => statSync(file).size + (existsSync(`${file}-wal`) ? statSync(`${file}-wal`).size : 0);
const dbBefore = dbSize();
let peak = rssBefore;
const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
t += 60_000;
await relay.poller.runOnce();
clearInterval(sampler);
peak = Math.max(peak, process.memoryUsage().rss);
const task = (await store.tasks.find(id))!;
const mb = (n: number) => `${(n / MiB).toFixed(1)} MB`;
console.log(
  JSON.stringify({
    body: mb(total),
    upstream_bytes_written_before_cutoff: mb(written),
    limit: mb(config.upstreamMaxBodyBytes),
    task: {
      status: task.status,
      error: JSON.parse(task.errorJson ?? "null")?.code,
      points_charged: task.pointsCharged,
    },
    rss_before: mb(rssBefore),
    rss_peak: mb(peak),
    db_growth: mb(dbSize() - dbBefore),
  }),
);
await relay.stop(1_000);
await store.close();
upstream.closeAllConnections();
upstream.close();
rmSync(dir, { recursive: true, force: true });

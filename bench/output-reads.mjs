// A task answer read of a 6.2 MB output stored in pieces (issue #38 item 7, fourteenth round), old
// build beside new in one process: each build's own SQLite store (a file in WAL mode, migrated by its
// build) holds the output of bench/big-outputs.mjs in pieces; one read is that build's jsonAnswer of a
// view holding the stored output, its body drained as a client's socket would take it. The old build
// reads the pieces as strings and encodes each with TextEncoder; a build with OutputStore.bytes reads
// them as blobs and sends those. Per build: CPU ms per read (process.cpuUsage), the main thread's GCs
// per read and their pause in all (a PerformanceObserver), medians of rounds; order alternated.
//   node bench/output-reads.mjs OLD_DIST [NEW_DIST=dist] [rounds=5] [reads per round=20]
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { PerformanceObserver } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { Hono } from "hono";
import { median, round } from "./lib/stats.mjs";

const [oldDist, newDist = "dist", roundsArg = "5", readsArg = "20"] = process.argv.slice(2);
if (!oldDist) {
  console.error("usage: node bench/output-reads.mjs OLD_DIST [NEW_DIST=dist] [rounds=5] [reads=20]");
  process.exit(2);
}
const load = (dist, file) => import(pathToFileURL(resolve(dist, file)).href);
const output = JSON.stringify({
  images: Array.from({ length: 60_000 }, (_, i) => ({
    url: `https://cdn.example.com/outputs/${i}/image-${i}.png`,
    width: 1024,
    height: 1024,
    seed: i,
  })),
});
const dir = mkdtempSync(join(os.tmpdir(), "genrelay-output-reads-"));

async function side(name, dist) {
  const { openDatabase } = await load(dist, "db/sqlite/open.js");
  const { sqliteStore } = await load(dist, "open-store.js");
  const { outputPieces } = await load(dist, "core/stored-output.js");
  const { PiecedJsonText } = await load(dist, "upstream/json-text.js");
  const { jsonAnswer } = await load(dist, "http/json-answer.js");
  const store = sqliteStore(openDatabase(join(dir, `${name}.db`)));
  const ref = `out_${name}`;
  await store.outputs.write(ref, outputPieces(output), 1);
  // What the build's task view gives an answer (services/tasks.ts): the bytes where the store has them.
  const pieces = () => (store.outputs.bytes ? store.outputs.bytes(ref) : store.outputs.pieces(ref));
  const app = new Hono().get("/", (c) =>
    jsonAnswer(c, { data: { id: "task_bench" }, output: new PiecedJsonText(pieces), usage: {} }, 200),
  );
  return {
    store,
    async read() {
      const res = await app.request("/");
      let bytes = 0;
      for await (const chunk of res.body) bytes += chunk.byteLength;
      return bytes;
    },
  };
}

const sides = { old: await side("old", oldDist), new: await side("new", newDist) };
let gcs = 0;
let gcMs = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gcs++;
    gcMs += e.duration;
  }
}).observe({ entryTypes: ["gc"] });
const rounds = Number(roundsArg);
const reads = Number(readsArg);
const loadStart = os.loadavg().map((x) => round(x, 2));
const figures = { old: [], new: [] };
for (let r = 0; r < rounds; r++) {
  for (const name of r % 2 === 0 ? ["old", "new"] : ["new", "old"]) {
    await sides[name].read();
    await new Promise((go) => setTimeout(go, 20));
    const [g0, p0] = [gcs, gcMs];
    const cpu = process.cpuUsage();
    let bytes = 0;
    for (let i = 0; i < reads; i++) bytes += await sides[name].read();
    const used = process.cpuUsage(cpu);
    await new Promise((go) => setTimeout(go, 20));
    figures[name].push({
      cpu_ms: (used.user + used.system) / 1000 / reads,
      gcs: (gcs - g0) / reads,
      gc_ms: (gcMs - p0) / reads,
      bytes: bytes / reads,
    });
  }
}
const summary = (rows) => ({
  cpu_ms_per_read: round(median(rows.map((x) => x.cpu_ms)), 2),
  gcs_per_read: round(median(rows.map((x) => x.gcs)), 2),
  gc_ms_per_read: round(median(rows.map((x) => x.gc_ms)), 2),
  bytes_per_read: rows[0].bytes,
  rounds_cpu_ms: rows.map((x) => round(x.cpu_ms, 2)),
});
console.log(
  JSON.stringify(
    {
      method: `${reads} reads a round of a ${output.length}-character output in pieces, each build's jsonAnswer drained; medians of ${rounds} rounds, order alternated`,
      load_start: loadStart,
      old: { dist: oldDist, ...summary(figures.old) },
      new: { dist: newDist, ...summary(figures.new) },
      load_end: os.loadavg().map((x) => round(x, 2)),
    },
    null,
    2,
  ),
);
for (const s of Object.values(sides)) await s.store.close();
rmSync(dir, { recursive: true, force: true });

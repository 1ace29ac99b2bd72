// CPU of one relay start (`node dist/main.js` in sandbox mode on SQLite, until it says it listens),
// this build beside another: `node bench/start.mjs` (BENCH_START_OLD_DIST, default /work/old5/dist when
// present; BENCH_ROUNDS, default 5). Every e2e test and benchmark that spawns a relay pays this, nearly
// all of it module loading (docs/testing.md, "Time"). Prints one JSON line: the medians in CPU-ms.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { cpuMsOf, ROOT, startRelay } from "./lib/proc.mjs";
import { median } from "./lib/stats.mjs";

const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const OLD = process.env.BENCH_START_OLD_DIST ?? (existsSync("/work/old5/dist/main.js") ? "/work/old5/dist" : null);
const builds = [["new", join(ROOT, "dist")], ...(OLD ? [["old", OLD]] : [])];

export async function startCpuMs(dist, tmp, name) {
  const relay = await startRelay({ DATABASE_PATH: join(tmp, `${name}.db`) }, join(tmp, `${name}.log`), { dist });
  try {
    return cpuMsOf(relay.pid);
  } finally {
    await relay.stop();
  }
}

const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-bench-start-"));
const samples = Object.fromEntries(builds.map(([b]) => [b, []]));
try {
  for (let round = 0; round < ROUNDS; round++) {
    // Order rotated each round, so neither build always starts on a warmer page cache.
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const [name, dist] of order) samples[name].push(await startCpuMs(dist, tmp, `${name}-${round}`));
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
const result = { loadavg: os.loadavg().map((l) => Number(l.toFixed(2))), rounds: ROUNDS };
for (const [name] of builds) result[`${name}_cpu_ms`] = median(samples[name]);
if (OLD) result.ratio = Number((result.new_cpu_ms / result.old_cpu_ms).toFixed(2));
console.log(JSON.stringify(result));

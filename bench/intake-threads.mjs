// Where intake's CPU goes by thread: the relay and bench/proto/intake-sqlite.mjs, each on a fresh
// database, 32 connections for WARM s of warm-up (2) and then SECONDS s; CPU (user + system) of every thread
// of the process from /proc/<pid>/task over the measured window, per 201: the main thread apart from
// the others (V8's platform workers, which run TurboFan's optimizing compiles and GC helpers, the
// libuv thread pool, worker threads). Sides alternate, ROUNDS rounds. `perf record -p <pid>` (or
// `perf report --sort pid`) names what a thread does; the thread ids are printed with PER=1.
//   [ROUNDS=3] [SECONDS=6] [WARM=2] [PER=1] [KEEP=1: keep the databases and the relay log] [XARGS="--v8-flag …"] node bench/intake-threads.mjs [DIST=dist]
import autocannon from "autocannon";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { BENCH, createClient, HELD_SIMULATOR_ENV, startRelay, startSimulator, threadCpuMs } from "./lib/proc.mjs";

const dist = resolve(process.argv[2] ?? "dist");
const rounds = Number(process.env.ROUNDS ?? 3);
const seconds = Number(process.env.SECONDS ?? 6);
const execArgv = (process.env.XARGS ?? "").split(" ").filter(Boolean);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-threads-"));
const sim = await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist });
const body = JSON.stringify({
  model: "p-image",
  mode: "generate",
  prompt: "a lighthouse",
  count: 1,
  callback_url: "https://hooks.example.com/x",
});

async function start(kind, db) {
  if (kind === "relay") {
    const env = {
      DATABASE_PATH: db,
      UPSTREAM_BASE_URL: sim.url,
      UPSTREAM_API_KEY: "sandbox",
      UPSTREAM_MAX_CONCURRENT: 1,
    };
    return startRelay(env, `${db}.log`, { dist, execArgv });
  }
  const child = spawn(process.execPath, [...execArgv, join(BENCH, "proto", "intake-sqlite.mjs")], {
    env: { ...process.env, DATABASE_PATH: db },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise((ok) => {
    child.stdout.on("data", (d) => {
      const m = /(http:\/\/[\d.]+:\d+)/.exec(String(d));
      if (m) ok(m[1]);
    });
  });
  return { pid: child.pid, url, stop: () => new Promise((ok) => child.once("exit", ok).kill("SIGTERM")) };
}

async function side(kind, round) {
  const db = join(tmp, `${kind}-${round}.db`);
  const { api_key } = await createClient(db, "threads", dist);
  const child = await start(kind, db);
  if (!child.url) throw new Error(`${kind} did not start`);
  let n = 0;
  const load = (duration) =>
    autocannon({
      url: child.url,
      connections: 32,
      duration,
      requests: [
        {
          method: "POST",
          path: "/openapi/v1/images/generations",
          headers: { "content-type": "application/json", authorization: `Bearer ${api_key}` },
          body,
          setupRequest: (req) => ({
            ...req,
            headers: { ...req.headers, "idempotency-key": `t-${String(n++).padStart(8, "0")}` },
          }),
        },
      ],
    });
  await load(Number(process.env.WARM ?? 2));
  const before = threadCpuMs(child.pid);
  const r = await load(seconds);
  const after = threadCpuMs(child.pid);
  await child.stop();
  const ok = r.statusCodeStats?.["201"]?.count ?? 0;
  const per = [...after].map(([tid, ms]) => [tid, (1000 * (ms - (before.get(tid) ?? 0))) / ok]);
  const main = per.find(([tid]) => tid === String(child.pid))?.[1] ?? 0;
  const total = per.reduce((sum, [, us]) => sum + us, 0);
  if (process.env.PER) console.log(`  ${per.map(([tid, us]) => `${tid}:${Math.round(us)}`).join(" ")}`);
  console.log(
    `${kind.padEnd(9)} round ${round + 1}: ${Math.round(ok / r.duration)}/s, µs CPU a 201: total ${Math.round(total)}, main ${Math.round(main)}, other threads ${Math.round(total - main)} (load ${os.loadavg()[0].toFixed(2)})`,
  );
}

try {
  for (let round = 0; round < rounds; round++)
    for (const kind of round % 2 === 0 ? ["relay", "prototype"] : ["prototype", "relay"]) await side(kind, round);
} finally {
  await sim.stop();
  if (!process.env.KEEP) rmSync(tmp, { recursive: true, force: true });
}

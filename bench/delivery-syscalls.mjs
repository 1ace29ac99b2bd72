// What a delivered webhook costs the kernel and each thread, relay beside prototype (issue #43,
// thirteenth round): one build's relay, then bench/proto/delivery.mjs, each draining a pre-written
// outbox (N due task.succeeded events of one client to one loopback receiver), with `strace -c -f`
// attached from readiness to the last webhook. Per process: system calls a webhook by name (counts
// do not depend on the machine's load, their times do), and CPU a webhook by thread from
// /proc/<pid>/task/<tid>/stat (the main thread, then the others: V8's platform workers, the libuv
// pool, worker threads). strace slows both sides: the CPU figures are not ones to quote, the counts are.
//   node bench/delivery-syscalls.mjs DIST [events=5000]
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { loadAverage } from "./lib/load-gate.mjs";
import {
  BENCH,
  countingReceiver,
  createClient,
  HELD_SIMULATOR_ENV,
  sleep,
  startNode,
  startRelay,
  startSimulator,
  threadCpuMs,
} from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";

const dist = resolve(process.argv[2] ?? "dist");
const EVENTS = Number(process.argv[3] ?? 5000);
const SHOWN = [
  "pwrite64",
  "pread64",
  "openat",
  "unlink",
  "access",
  "newfstatat",
  "close",
  "fcntl",
  "fdatasync",
  "fsync",
  "writev",
  "epoll_pwait",
];
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-syscalls-"));
const sim = await startSimulator(HELD_SIMULATOR_ENV, join(tmp, "sim.log"), { dist });
const { hook, seen, reset, close } = await countingReceiver();

/** `strace -c` output as { name: calls }. */
function counts(file) {
  const out = {};
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length >= 5 && /^\d+$/.test(f[3])) out[f.at(-1)] = Number(f[3]);
  }
  return out;
}

async function side(kind) {
  const db = join(tmp, `${kind}.db`);
  const { id } = await createClient(db, "syscalls", dist);
  seedPendingEvents(db, id, EVENTS, hook);
  reset();
  let child;
  if (kind === "prototype") {
    child = startNode(kind, join(BENCH, "proto", "delivery.mjs"), {
      env: { DATABASE_PATH: db },
      logFile: join(tmp, `${kind}.log`),
    });
    await child.waitFor(/proto-delivery ready/);
  } else {
    const env = {
      DATABASE_PATH: db,
      UPSTREAM_BASE_URL: sim.url,
      UPSTREAM_API_KEY: "sandbox",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    };
    child = await startRelay(env, join(tmp, `${kind}.log`), { dist });
  }
  const out = join(tmp, `${kind}.strace`);
  const tracer = spawn("strace", ["-c", "-f", "-p", String(child.pid), "-o", out], { stdio: "ignore" });
  await sleep(500);
  const cpu0 = threadCpuMs(child.pid);
  const before = seen.hits;
  const deadline = Date.now() + 120_000;
  while (seen.hits < EVENTS && Date.now() < deadline) await sleep(50);
  const cpu1 = threadCpuMs(child.pid);
  tracer.kill("SIGINT");
  await new Promise((r) => tracer.once("exit", r));
  await child.stop();
  const n = seen.hits - before;
  const calls = counts(out);
  let main = 0;
  const others = [];
  for (const [tid, ms] of cpu1) {
    const used = ms - (cpu0.get(tid) ?? 0);
    if (tid === String(child.pid)) main = used;
    else if (used > 0) others.push(used);
  }
  const per = (x) => Math.round((x / n) * 100) / 100;
  return {
    kind,
    webhooks: n,
    syscalls_per_webhook: Object.fromEntries(SHOWN.filter((s) => calls[s]).map((s) => [s, per(calls[s])])),
    cpu_us_per_webhook: {
      main: Math.round((main * 1000) / n),
      other_threads: others.sort((a, b) => b - a).map((ms) => Math.round((ms * 1000) / n)),
    },
  };
}

await prepareSeeding();
const loadBefore = loadAverage();
for (const kind of ["relay", "prototype"]) process.stdout.write(`${JSON.stringify(await side(kind))}\n`);
process.stdout.write(`${JSON.stringify({ dist, events: EVENTS, load: [loadBefore, loadAverage()] })}\n`);
await sim.stop();
close();
rmSync(tmp, { recursive: true, force: true });

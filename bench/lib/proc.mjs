// Child processes of the benchmark: the built relay, the simulator, the bare baseline server, the
// webhook receiver and the raw sender. Each child's output goes to a log file (not a pipe), so the
// benchmark process never spends CPU reading the relay's per-request log lines.
import { execFile, execFileSync, fork, spawn } from "node:child_process";
import { closeSync, openSync, readdirSync, readFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { DIST, ROOT } from "./dist.mjs";

export { ROOT };
export const BENCH = join(ROOT, "bench");
const TETHER = pathToFileURL(join(BENCH, "lib", "tether.mjs")).href;

/** A clean environment: nothing from the caller's shell (PORT, DATABASE_PATH, ...) leaks into a child. */
export function baseEnv(extra = {}) {
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
  if (process.env.BENCH_DIST) env.BENCH_DIST = process.env.BENCH_DIST;
  if (process.env.HOME) env.HOME = process.env.HOME;
  if (process.env.TMPDIR) env.TMPDIR = process.env.TMPDIR;
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) env[k] = String(v);
  return env;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts `node <script>` with stdout and stderr appended to logFile.
 * @returns {{ proc: import('node:child_process').ChildProcess, pid: number, logFile: string, waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>, stop(timeoutMs?: number): Promise<number|null>, exited: boolean }}
 */
export function startNode(name, script, { env = {}, logFile, execArgv = [], ipc = false } = {}) {
  const fd = openSync(logFile, "a");
  // fd 4: the tether (bench/lib/tether.mjs, preloaded), a pipe whose end tells the child this process is gone.
  const stdio = ["ignore", fd, fd, ipc ? "ipc" : "ignore", "pipe"];
  const args = ["--import", TETHER, ...execArgv];
  const proc = ipc
    ? fork(script, [], { env: baseEnv(env), stdio, execArgv: args })
    : spawn(process.execPath, [...args, script], { env: baseEnv(env), stdio });
  closeSync(fd);
  // Kept open and never written; it holds nothing open here either.
  proc.stdio[4]?.unref?.();
  let exitCode;
  const exited = new Promise((resolve) =>
    proc.once("exit", (code, signal) => {
      exitCode = code ?? signal;
      resolve(code);
    }),
  );
  const child = {
    name,
    proc,
    pid: proc.pid,
    logFile,
    get exited() {
      return exitCode !== undefined;
    },
    log() {
      try {
        return readFileSync(logFile, "utf8");
      } catch {
        return "";
      }
    },
    /**
     * Polls the log file until a line matches; fails when the process exits first, or when it has
     * used no CPU for `timeoutMs`. A start still loading its modules on a loaded machine (a relay's
     * second of CPU took over 20 s at load 16) is waited for, up to ten times `timeoutMs` in all.
     */
    async waitFor(re, timeoutMs = 20_000) {
      const last = Date.now() + 10 * timeoutMs;
      let deadline = Date.now() + timeoutMs;
      let cpu = 0;
      for (;;) {
        const m = re.exec(child.log());
        if (m) return m;
        if (exitCode !== undefined)
          throw new Error(`${name} exited (${exitCode}) before printing ${re}:\n${tail(child.log())}`);
        if (Date.now() > deadline) {
          const used = cpuMsOfQuietly(proc.pid);
          if (used <= cpu || Date.now() > last)
            throw new Error(`timed out waiting for ${re} from ${name}:\n${tail(child.log())}`);
          cpu = used;
          deadline = Date.now() + timeoutMs;
        }
        await sleep(25);
      }
    },
    /** SIGTERM, then SIGKILL if it has not exited in time. Resolves with the exit code. */
    async stop(timeoutMs = 15_000) {
      if (exitCode !== undefined) return exitCode;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => {
        if (exitCode === undefined) proc.kill("SIGKILL");
      }, timeoutMs);
      await exited;
      clearTimeout(timer);
      return exitCode;
    },
    exitedPromise: exited,
  };
  return child;
}

function tail(text, lines = 15) {
  return text.split("\n").slice(-lines).join("\n");
}

/** A simulator whose tasks finish at once, with no read limit: the end-to-end upstream. */
export const FAST_SIMULATOR_ENV = {
  SIM_IMAGE_QUEUED_MS: 0,
  SIM_IMAGE_PROCESSING_MS: 0,
  SIM_VIDEO_QUEUED_MS: 0,
  SIM_VIDEO_PROCESSING_MS: 0,
  SIM_MAX_CONCURRENT: 100_000,
  SIM_READS_PER_MINUTE: 0,
};

/** A simulator whose tasks stay queued for a day: the relay's outbox is all there is to do. */
export const HELD_SIMULATOR_ENV = {
  SIM_API_KEYS: "sandbox",
  SIM_IMAGE_QUEUED_MS: 86_400_000,
  SIM_MAX_CONCURRENT: 100_000,
  SIM_READS_PER_MINUTE: 0,
};

/**
 * A loopback webhook receiver in this process that answers 200 and counts: `seen.hits`, and the
 * performance.now() of the first and the last arrival (`reset` starts the count again).
 */
export async function countingReceiver() {
  const seen = { hits: 0, first: 0, last: 0 };
  const server = createHttpServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const now = performance.now();
      if (seen.hits === 0) seen.first = now;
      seen.last = now;
      seen.hits++;
      res.end("ok");
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    hook: `http://127.0.0.1:${server.address().port}/hook`,
    seen,
    reset: () => {
      seen.hits = 0;
    },
    close: () => server.close(),
  };
}

/** The standalone simulator on a free port; resolves with its base URL. `dist`: another build (A/B). */
export async function startSimulator(env, logFile, { dist = DIST } = {}) {
  const child = startNode("simulator", join(dist, "simulator", "main.js"), {
    env: { SIM_PORT: 0, SIM_HOST: "127.0.0.1", SIM_BALANCE: 1_000_000_000_000, ...env },
    logFile,
  });
  const m = await child.waitFor(/listening on (http:\/\/[\d.]+:\d+)/);
  return { ...child, url: m[1] };
}

/**
 * The built relay (`node dist/main.js`) on a free port. PORT=0 and the port is read from the
 * "genrelay listening" JSON line, so LOG_LEVEL must keep info lines (the default). `dist`: another build (A/B).
 */
export async function startRelay(env, logFile, { execArgv = [], dist = DIST } = {}) {
  const child = startNode("relay", join(dist, "main.js"), {
    env: { PORT: 0, HOST: "127.0.0.1", LOG_LEVEL: "info", ...env },
    logFile,
    execArgv,
  });
  const m = await child.waitFor(/^.*"msg":"genrelay listening".*$/m);
  const port = /"port":(\d+)/.exec(m[0])?.[1];
  if (!port) throw new Error(`relay listening line without a port: ${m[0]}`);
  return { ...child, url: `http://127.0.0.1:${port}`, port: Number(port) };
}

/** What a prototype of bench/proto/ prints once it serves: its URL. */
export const PROTO_LISTENING = /listening on (http:\/\/[\d.]+:\d+)/;

/**
 * A prototype of bench/proto/ as its own process (like the relay), tracked by `track` (its stop on
 * the bench's end), its log in `tmp`: resolves once it printed `ready`, its first group as `url`.
 */
export async function startProto({ track, tmp }, name, script, env, ready = PROTO_LISTENING, execArgv = []) {
  const child = track(
    startNode(name, join(BENCH, "proto", script), { env, execArgv, logFile: join(tmp, `${name}.log`) }),
  );
  const m = await child.waitFor(ready);
  return Object.assign(child, { url: m[1] });
}

/**
 * A built relay of `dist` on a fresh database `<tmp>/<name>.db` holding the named clients, reading
 * `upstreamUrl` without a read limit and delivering to loopback: the set-up of the rows that measure
 * one build beside another (public-routes, tracing, big-outputs). Resolves with the relay, the
 * clients by name and the database's path.
 */
export async function startLoopbackRelay({ dist = DIST, tmp, name, upstreamUrl, clients, env = {}, execArgv = [] }) {
  const databasePath = join(tmp, `${name}.db`);
  const made = {};
  for (const client of clients) made[client] = await createClient(databasePath, client, dist);
  const relay = await startRelay(
    {
      DATABASE_PATH: databasePath,
      UPSTREAM_BASE_URL: upstreamUrl,
      UPSTREAM_API_KEY: "sandbox",
      UPSTREAM_READS_PER_MINUTE: 100_000,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      ...env,
    },
    join(tmp, `relay-${name}.log`),
    { dist, execArgv },
  );
  return { relay, clients: made, databasePath };
}

/** `node dist/cli.js clients create --name NAME --json` against a database (migrating it). */
export function createClient(databasePath, name = "bench", dist = DIST) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [join(dist, "cli.js"), "clients", "create", "--name", name, "--json"],
      { env: baseEnv({ DATABASE_PATH: databasePath, LOG_LEVEL: "warn" }) },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`clients create failed: ${err.message}\n${stderr}`));
        try {
          resolve(JSON.parse(stdout.trim().split("\n").pop()));
        } catch (_e) {
          reject(new Error(`clients create printed no JSON: ${stdout}\n${stderr}`));
        }
      },
    );
  });
}

/** Resident set size and its peak (MB) from /proc/<pid>/status. */
export function memoryOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rssMb: kb("VmRSS") / 1024, peakMb: kb("VmHWM") / 1024 };
}

let clockTicks = null;
/** CPU time (user + system) in ms from a /proc stat file: utime and stime, fields 14 and 15, in clock ticks. */
function statCpuMs(path) {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  const stat = readFileSync(path, "utf8");
  // The command name (field 2) may contain spaces: count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}

/**
 * CPU time (user + system, all threads) a process has used so far, in ms, from /proc/<pid>/stat
 * (`getconf CLK_TCK` ticks, 100 on Linux).
 */
export function cpuMsOf(pid) {
  return statCpuMs(`/proc/${pid}/stat`);
}

/** CPU ms of each thread of `pid` so far, by thread id (/proc/<pid>/task/<tid>/stat); a thread that ended meanwhile is left out. */
export function threadCpuMs(pid) {
  const out = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(tid, statCpuMs(`/proc/${pid}/task/${tid}/stat`));
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

/** cpuMsOf, or -1 when the process is gone. */
function cpuMsOfQuietly(pid) {
  try {
    return cpuMsOf(pid);
  } catch {
    return -1;
  }
}

/**
 * CPU ms of a process and all its descendants, by pid (a database server and its backends). The
 * difference of two snapshots (treeCpuDelta) counts a process that started in between from 0; one
 * that ended in between is missed.
 */
export function treeCpuSnapshot(rootPid) {
  const parent = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // gone meanwhile
    }
  }
  const inTree = (pid) => {
    for (let p = pid, hops = 0; p > 1 && hops < 64; p = parent.get(p) ?? 0, hops++) if (p === rootPid) return true;
    return false;
  };
  const out = new Map();
  for (const pid of parent.keys()) {
    if (!inTree(pid)) continue;
    try {
      out.set(pid, cpuMsOf(pid));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export function treeCpuDelta(before, after) {
  let ms = 0;
  for (const [pid, cpu] of after) ms += cpu - (before.get(pid) ?? 0);
  return ms;
}

/** A port the OS considers free right now (for servers that cannot report a PORT=0 choice). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A forked helper speaking { id, cmd, ... } -> { id, ok, result | error } over IPC.
 */
export function ipcChild(name, script, logFile, env = {}) {
  const child = startNode(name, script, { env, logFile, ipc: true });
  let next = 1;
  const pending = new Map();
  child.proc.on("message", (msg) => {
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.ok) p.resolve(msg.result);
    else p.reject(new Error(`${name}: ${msg.error}`));
  });
  void child.exitedPromise.then(() => {
    for (const p of pending.values()) p.reject(new Error(`${name} exited:\n${tail(child.log())}`));
    pending.clear();
  });
  return Object.assign(child, {
    call(cmd, args = {}) {
      const id = next++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        child.proc.send({ id, cmd, ...args });
      });
    },
  });
}

/** Serves { id, cmd } requests in a forked helper. */
export function serveIpc(handlers) {
  process.on("message", async (msg) => {
    try {
      const handler = handlers[msg.cmd];
      if (!handler) throw new Error(`unknown command ${msg.cmd}`);
      const result = await handler(msg);
      process.send({ id: msg.id, ok: true, result });
    } catch (err) {
      process.send({ id: msg.id, ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
    }
  });
  process.on("disconnect", () => process.exit(0));
}

export { sleep };

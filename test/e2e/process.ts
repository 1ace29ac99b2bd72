import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { Webhook } from "standardwebhooks";
import { afterEach, expect } from "vitest";
import { freshPgDatabase } from "../helpers/pg.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const DIST = join(ROOT, "dist");
/** Whether the relay and the simulator are built (`npm run build`): the tests of built processes skip otherwise. */
export const BUILT = existsSync(join(DIST, "main.js")) && existsSync(join(DIST, "simulator", "main.js"));

export interface Child {
  proc: ChildProcess;
  /** Every stdout/stderr line so far, for failure messages. */
  lines: string[];
  /** Resolves with the first line matching, rejects when the process exits first. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

export function startNode(script: string, env: Record<string, string>, execArgv: string[] = []): Child {
  const proc = spawn(process.execPath, [...execArgv, join(DIST, script)], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: (m: RegExpExecArray) => void; reject: (e: Error) => void }[] = [];
  const onLine = (line: string) => {
    lines.push(line);
    for (const w of [...waiters]) {
      const m = w.pattern.exec(line);
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  };
  createInterface({ input: proc.stdout! }).on("line", onLine);
  createInterface({ input: proc.stderr! }).on("line", onLine);
  const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => resolve(code)));
  void exited.then(() => {
    for (const w of waiters.splice(0))
      w.reject(new Error(`${script} exited before printing ${w.pattern}:\n${lines.slice(-20).join("\n")}`));
  });
  return {
    proc,
    lines,
    waitForLine(pattern, timeoutMs = 15_000) {
      for (const line of lines) {
        const m = pattern.exec(line);
        if (m) return Promise.resolve(m);
      }
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`timed out waiting for ${pattern} from ${script}:\n${lines.slice(-20).join("\n")}`)),
          timeoutMs,
        );
        waiters.push({
          pattern,
          resolve: (m) => {
            clearTimeout(timer);
            resolve(m);
          },
          reject: (e) => {
            clearTimeout(timer);
            reject(e);
          },
        });
      });
    },
    async kill(signal = "SIGTERM") {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

/** The built relay (dist/main.js) on a free port, once it says it listens; killed if it never does. */
export async function startRelayProcess(env: Record<string, string>): Promise<{ child: Child; url: string }> {
  const child = startNode("main.js", env);
  let m: RegExpExecArray;
  try {
    m = await child.waitForLine(/^.*"msg":"genrelay listening".*$/);
  } catch (err) {
    await child.kill("SIGKILL"); // never leave a relay running behind a failed start
    throw err;
  }
  const port = /"port":(\d+)/.exec(m[0])?.[1];
  if (!port) throw new Error(`no port in ${m[0]}`);
  return { child, url: `http://127.0.0.1:${port}` };
}

/**
 * The processes and cleanups of a file's tests, ended after each test: every child resumed (a test
 * may have stopped one with SIGSTOP) and killed, then the cleanups, newest first.
 */
export function processesPerTest(): {
  children: Child[];
  cleanups: Array<() => Promise<void>>;
  /** `startRelayProcess`, its child killed after the test. */
  startRelay(env: Record<string, string>): Promise<{ child: Child; url: string }>;
  /** `startReceiver`, closed after the test. */
  startReceiver(): Promise<Receiver>;
  /** `pgSetup` on a fresh database: the simulator killed and the database dropped after the test. */
  pgSetup(name: string): Promise<PgSetup>;
} {
  const children: Child[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    await Promise.all(
      children.splice(0).map((c) => {
        c.proc.kill("SIGCONT");
        return c.kill("SIGKILL");
      }),
    );
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return {
    children,
    cleanups,
    async startRelay(env) {
      const relay = await startRelayProcess(env);
      children.push(relay.child);
      return relay;
    },
    async startReceiver() {
      const receiver = await startReceiver();
      cleanups.push(() => receiver.close());
      return receiver;
    },
    async pgSetup(name) {
      const db = await freshPgDatabase();
      cleanups.push(db.drop);
      const setup = await pgSetup(db.url, name);
      children.push(setup.simulator);
      return setup;
    },
  };
}

export interface ReceivedHook {
  headers: IncomingHttpHeaders;
  body: string;
}

export interface Receiver {
  url: string;
  hooks: ReceivedHook[];
  onHook(fn: () => void): void;
  close(): Promise<void>;
}

/** A loopback webhook receiver that records every request and answers 200. */
export async function startReceiver(): Promise<Receiver> {
  const hooks: ReceivedHook[] = [];
  const listeners: (() => void)[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      hooks.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(200).end("ok");
      for (const l of listeners) l();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    hooks,
    onHook: (fn) => listeners.push(fn),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Resolves when `done()` holds, re-checked on every `tick` notification; rejects after timeoutMs. */
export function until(
  done: () => boolean,
  subscribe: (fn: () => void) => void,
  timeoutMs: number,
  describe: () => string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (done()) return resolve();
    const timer = setTimeout(() => reject(new Error(`timed out: ${describe()}`)), timeoutMs);
    subscribe(() => {
      if (done()) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

/** The simulator as its own process, once it says where it listens. */
async function startSimulator(env: Record<string, string>): Promise<{ simulator: Child; simUrl: string }> {
  const simulator = startNode("simulator/main.js", { SIM_PORT: "0", SIM_MAX_CONCURRENT: "1000", ...env });
  const simUrl = (await simulator.waitForLine(/listening on (http:\/\/\S+)/))[1]!;
  return { simulator, simUrl };
}

/** The relay env every e2e test here shares, but for its database and upstream. */
function relayEnvFor(
  database: Record<string, string>,
  upstream: { url: string; key: string; readsPerMinute: string },
): Record<string, string> {
  return {
    PORT: "0",
    ...database,
    UPSTREAM_BASE_URL: upstream.url,
    UPSTREAM_API_KEY: upstream.key,
    UPSTREAM_READS_PER_MINUTE: upstream.readsPerMinute,
    UPSTREAM_TIMEOUT_MS: "2000",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_TIMEOUT_MS: "2000",
    WEBHOOK_RETRY_SCHEDULE: "0s,1s,2s,5s,10s",
    LOG_LEVEL: "info",
  };
}

/** One client made by the built CLI (`clients create`) in the database `database` names. */
function createClient(database: Record<string, string>, name: string): { apiKey: string; secret: string } {
  const created = JSON.parse(
    execFileSync(process.execPath, [join(DIST, "cli.js"), "clients", "create", "--name", name, "--json"], {
      env: { PATH: process.env.PATH ?? "", ...database },
      encoding: "utf8",
    }),
  ) as { api_key: string; webhook_secret: string };
  return { apiKey: created.api_key, secret: created.webhook_secret };
}

/** The simulator as its own process (short timings, no read limit), a relay env on SQLite in `dir`, and one client. */
export interface SqliteSetup {
  simulator: Child;
  simUrl: string;
  relayEnv: Record<string, string>;
  apiKey: string;
  secret: string;
}

/** sqliteSetup's simulator: short timings, no read limit. */
export function startSqliteSimulator(): Promise<{ simulator: Child; simUrl: string }> {
  return startSimulator({
    SIM_API_KEYS: "e2e-upstream-key",
    SIM_READS_PER_MINUTE: "0",
    SIM_IMAGE_QUEUED_MS: "200",
    SIM_IMAGE_PROCESSING_MS: "600",
    SIM_VIDEO_QUEUED_MS: "300",
    SIM_VIDEO_PROCESSING_MS: "1500",
  });
}

/**
 * `sim`: a startSqliteSimulator() already running, shared by a file's tests where none reads the
 * simulator's own counts (a process start costs about 1 s of CPU); without it, one of the setup's own.
 */
export async function sqliteSetup(
  dir: string,
  clientName: string,
  sim?: { simulator: Child; simUrl: string },
): Promise<SqliteSetup> {
  const { simulator, simUrl } = sim ?? (await startSqliteSimulator());
  const database = { DATABASE_PATH: join(dir, "relay.db") };
  const relayEnv = relayEnvFor(database, { url: simUrl, key: "e2e-upstream-key", readsPerMinute: "600" });
  return { simulator, simUrl, relayEnv, ...createClient(database, clientName) };
}

/**
 * Relays on the PostgreSQL database `databaseUrl` against the simulator as its own process, which
 * enforces 120 reads a minute per account (answering 429 past it), and one client. `relayEnv` takes
 * the address the relay reaches the simulator at (the simulator's own, or a proxy in front of it).
 */
export interface PgSetup {
  simulator: Child;
  simUrl: string;
  relayEnv(upstreamUrl: string): Record<string, string>;
  apiKey: string;
  secret: string;
}

async function pgSetup(databaseUrl: string, name: string): Promise<PgSetup> {
  const key = `${name}-upstream-key`;
  const { simulator, simUrl } = await startSimulator({
    SIM_API_KEYS: key,
    SIM_READS_PER_MINUTE: "120",
    SIM_IMAGE_QUEUED_MS: "300",
    SIM_IMAGE_PROCESSING_MS: "1500",
  });
  const database = { DATABASE_URL: databaseUrl };
  const relayEnv = (url: string) => relayEnvFor(database, { url, key, readsPerMinute: "100" });
  return { simulator, simUrl, relayEnv, ...createClient(database, `${name}-e2e`) };
}

/** Creates one image task through the relay at `relayUrl`, expects 201, and returns the task's id. */
export async function createImage(
  relayUrl: string,
  apiKey: string,
  body: { idempotencyKey: string; prompt: string; callbackUrl: string },
  signal?: AbortSignal,
): Promise<string> {
  const res = await fetch(`${relayUrl}/openapi/v1/images/generations`, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${apiKey}`,
      "Content-Type": "application/json",
      "Idempotency-Key": body.idempotencyKey,
    },
    ...(signal ? { signal } : {}),
    body: JSON.stringify({
      model: "p-image",
      mode: "generate",
      prompt: body.prompt,
      count: 1,
      callback_url: body.callbackUrl,
    }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { data: { id: string } }).data.id;
}

/** The ids of the tasks whose `task.succeeded` webhook arrived, each signature verified with `secret`. */
export function succeededTasks(hooks: ReceivedHook[], secret: string): Set<string> {
  const wh = new Webhook(secret);
  const seen = new Set<string>();
  for (const hook of hooks) {
    const event = wh.verify(hook.body, {
      "webhook-id": String(hook.headers["webhook-id"]),
      "webhook-timestamp": String(hook.headers["webhook-timestamp"]),
      "webhook-signature": String(hook.headers["webhook-signature"]),
    }) as { type: string; data: { id: string } };
    if (event.type === "task.succeeded") seen.add(event.data.id);
  }
  return seen;
}

/** The simulator's counts (`GET /_sim/stats`): tasks created, the most creations under one idempotency key, 429s answered. */
export async function simulatorStats(
  simUrl: string,
): Promise<{ tasks_created: number; creations_per_key_max: number; rate_limited: number }> {
  return (await (await fetch(`${simUrl}/_sim/stats`)).json()) as {
    tasks_created: number;
    creations_per_key_max: number;
    rate_limited: number;
  };
}

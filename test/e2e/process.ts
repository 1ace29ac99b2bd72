import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const DIST = join(ROOT, "dist");

export interface Child {
  proc: ChildProcess;
  /** Every stdout/stderr line so far, for failure messages. */
  lines: string[];
  /** Resolves with the first line matching, rejects when the process exits first. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

export function startNode(script: string, env: Record<string, string>): Child {
  const proc = spawn(process.execPath, [join(DIST, script)], {
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

export interface ReceivedHook {
  headers: IncomingHttpHeaders;
  body: string;
}

/** A loopback webhook receiver that records every request and answers 200. */
export async function startReceiver(): Promise<{
  url: string;
  hooks: ReceivedHook[];
  onHook(fn: () => void): void;
  close(): Promise<void>;
}> {
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

/** The simulator as its own process (short timings, no read limit), a relay env on SQLite in `dir`, and one client. */
export interface SqliteSetup {
  simulator: Child;
  simUrl: string;
  relayEnv: Record<string, string>;
  apiKey: string;
  secret: string;
}

export async function sqliteSetup(dir: string, clientName: string): Promise<SqliteSetup> {
  const simulator = startNode("simulator/main.js", {
    SIM_PORT: "0",
    SIM_API_KEYS: "e2e-upstream-key",
    SIM_READS_PER_MINUTE: "0",
    SIM_MAX_CONCURRENT: "1000",
    SIM_IMAGE_QUEUED_MS: "200",
    SIM_IMAGE_PROCESSING_MS: "600",
    SIM_VIDEO_QUEUED_MS: "300",
    SIM_VIDEO_PROCESSING_MS: "1500",
  });
  const simUrl = (await simulator.waitForLine(/listening on (http:\/\/\S+)/))[1]!;
  const relayEnv = {
    PORT: "0",
    DATABASE_PATH: join(dir, "relay.db"),
    UPSTREAM_BASE_URL: simUrl,
    UPSTREAM_API_KEY: "e2e-upstream-key",
    UPSTREAM_READS_PER_MINUTE: "600",
    UPSTREAM_TIMEOUT_MS: "2000",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_TIMEOUT_MS: "2000",
    WEBHOOK_RETRY_SCHEDULE: "0s,1s,2s,5s,10s",
    LOG_LEVEL: "info",
  };
  const created = JSON.parse(
    execFileSync(process.execPath, [join(DIST, "cli.js"), "clients", "create", "--name", clientName, "--json"], {
      env: { PATH: process.env.PATH ?? "", DATABASE_PATH: relayEnv.DATABASE_PATH },
      encoding: "utf8",
    }),
  ) as { api_key: string; webhook_secret: string };
  return { simulator, simUrl, relayEnv, apiKey: created.api_key, secret: created.webhook_secret };
}

// Brokers for bench/queues.mjs, on loopback with their own ports and data directories: Debian's
// rabbitmq-server and nats-server as process groups, and local-aws-sqs in a child node process
// (bench/lib/sqs-server.mjs), so none of their CPU is counted as the benchmark's. The test suite's
// equivalents (test/helpers/brokers.ts) add stop/start and freezing; a benchmark needs neither.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BENCH, freePort, ROOT, startNode } from "./proc.mjs";

const RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const INSTALL = "apt-get install -y --no-install-recommends rabbitmq-server nats-server";

function processGroup(what, command, args, env, ready, timeoutMs, dir) {
  const child = spawn(command, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  // Ends the group if this bench is killed before stop() (scripts/watch-group.cjs).
  const watcher = spawn(process.execPath, [join(ROOT, "scripts", "watch-group.cjs"), String(child.pid), dir], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
  });
  watcher.on("error", () => {});
  watcher.stdin.on("error", () => {});
  watcher.stdin.unref();
  watcher.unref();
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const stop = async () => {
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {}
    const hard = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
    }, 10_000);
    await exited;
    clearTimeout(hard);
    rmSync(dir, { recursive: true, force: true });
  };
  const started = new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`${what} did not start in ${timeoutMs} ms:\n${seen}`)), timeoutMs);
    const onData = (chunk) => {
      seen = (seen + chunk.toString("utf8")).slice(-8_000);
      if (ready.test(seen)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("exit", (code) => reject(new Error(`${what} exited (${code}) before it was ready:\n${seen}`)));
  });
  return started.then(
    () => ({ pid: child.pid, stop }),
    async (err) => {
      await stop();
      throw err;
    },
  );
}

/** RabbitMQ, run directly (the /usr/sbin wrapper switches users): its own node name, ports and data. */
export async function startRabbit() {
  if (!existsSync(RABBITMQ_SERVER)) throw new Error(`rabbitmq-server is not installed; install it with: ${INSTALL}`);
  const dir = mkdtempSync(join(tmpdir(), "genrelay-bench-rabbit-"));
  const port = await freePort();
  const distPort = await freePort();
  const group = await processGroup(
    "rabbitmq-server",
    RABBITMQ_SERVER,
    [],
    {
      HOME: dir,
      RABBITMQ_NODENAME: `genrelaybench${port}@localhost`,
      RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
      RABBITMQ_NODE_PORT: String(port),
      RABBITMQ_DIST_PORT: String(distPort),
      RABBITMQ_MNESIA_BASE: join(dir, "mnesia"),
      RABBITMQ_LOG_BASE: join(dir, "log"),
      RABBITMQ_LOGS: "-",
      RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, "enabled_plugins"),
      RABBITMQ_CONFIG_FILE: join(dir, "rabbitmq"),
      RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, "advanced.config"),
      RABBITMQ_CONF_ENV_FILE: join(dir, "rabbitmq-env.conf"),
    },
    /Server startup complete/,
    90_000,
    dir,
  );
  return { ...group, url: `amqp://guest:guest@127.0.0.1:${port}` };
}

/** nats-server with JetStream and its own store directory. */
export async function startNats() {
  const bin = ["/usr/sbin/nats-server", "/usr/bin/nats-server"].find((p) => existsSync(p));
  if (!bin) throw new Error(`nats-server is not installed; install it with: ${INSTALL}`);
  const dir = mkdtempSync(join(tmpdir(), "genrelay-bench-nats-"));
  const port = await freePort();
  const group = await processGroup(
    "nats-server",
    bin,
    ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", dir],
    {},
    /Server is ready/,
    20_000,
    dir,
  );
  return { ...group, url: `nats://127.0.0.1:${port}` };
}

/** local-aws-sqs in a child process of its own. */
export async function startSqs(logFile) {
  const child = startNode("sqs-server", join(BENCH, "lib", "sqs-server.mjs"), { env: { PORT: 0 }, logFile });
  const m = await child.waitFor(/sqs listening on (http:\/\/[\d.]+:\d+)/);
  return { pid: child.pid, url: m[1], region: "us-east-1", stop: () => child.stop() };
}

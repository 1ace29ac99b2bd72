import { type ChildProcess, spawn } from "node:child_process";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect as netConnect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SQSClient } from "@aws-sdk/client-sqs";
import { createRequestHandler } from "local-aws-sqs";
import { type QueueMessage, queueHeaders } from "../../src/destinations/queue-message.js";
import { webhookHeaders } from "../../src/webhooks/sign.js";
import { inject } from "vitest";
import { freePort } from "./ports.js";

/**
 * Real brokers for the queue destinations' tests (docs/destinations.md), started by the suite on
 * loopback: Debian's RabbitMQ and NATS server as child processes with their own data directories
 * and free ports, and an SQS-compatible server (the npm package local-aws-sqs) in this process.
 * A broker that is not installed FAILS the test with the command that installs it: CI's .ci/run
 * installs both, so a missing one is a broken machine, never a reason to skip.
 *
 * Each broker can be stopped and started again on the same port with the same data (a broker that
 * goes away mid-run), or frozen with SIGSTOP (a broker that stalls).
 */

const RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const INSTALL = "apt-get install -y --no-install-recommends rabbitmq-server nats-server";

export interface Broker {
  /** Where a client connects (no credentials needed beyond what it holds). */
  readonly url: string;
  readonly port: number;
  /** Stops the broker, keeping its data; start() brings it back on the same port. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and removes its data. */
  close(): Promise<void>;
}

/** A broker in a process of its own, which can also be frozen: its sockets stay open and say nothing. */
export interface ProcessBroker extends Broker {
  /** SIGSTOP to the broker's process group; resolves once every thread of it has stopped. */
  freeze(): Promise<void>;
  /** SIGCONT to the broker's process group. */
  thaw(): void;
}

function whichNats(): string | null {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/usr/bin"])) {
    const candidate = join(dir, "nats-server");
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

function missing(what: string): Error {
  return new Error(`${what} is not installed on this machine; install it with: ${INSTALL}`);
}

/** Resolves when the process prints `ready`, rejects when it exits first or takes over `timeoutMs`. */
function waitForLine(child: ChildProcess, ready: RegExp, what: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(
      () => done(new Error(`${what} did not start within ${timeoutMs} ms:\n${seen}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      seen = (seen + chunk.toString("utf8")).slice(-8_000);
      if (ready.test(seen)) done(null);
    };
    const onExit = (code: number | null) => done(new Error(`${what} exited (${code}) before it was ready:\n${seen}`));
    const done = (err: Error | null) => {
      clearTimeout(timer);
      child.stdout?.off("data", onData);
      child.stderr?.off("data", onData);
      child.off("exit", onExit);
      if (err) reject(err);
      else resolve();
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", onExit);
  });
}

/** Ends a process group (the broker and what its start script spawned) and waits for the leader to exit. */
async function endGroup(child: ChildProcess | null, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pid = child.pid!;
  try {
    process.kill(-pid, "SIGCONT");
    process.kill(-pid, signal);
  } catch {
    return;
  }
  const hard = setTimeout(() => {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {}
  }, 10_000);
  await exited;
  clearTimeout(hard);
}

/**
 * Waits until every thread of the process group is stopped (state `T` in /proc): a signal takes
 * effect when the target is next scheduled, and a test must not publish into a broker still running.
 */
async function groupStopped(pgid: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const running = readdirSync("/proc")
      .filter((d) => /^\d+$/.test(d))
      .flatMap((pid) => {
        try {
          const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
          const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
          if (Number(fields[2]) !== pgid) return [];
          return readdirSync(`/proc/${pid}/task`).map((tid) => {
            const t = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
            return t.slice(t.lastIndexOf(")") + 2).split(" ")[0];
          });
        } catch {
          return [];
        }
      })
      .filter((state) => state !== "T" && state !== "t" && state !== "Z");
    if (running.length === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`process group ${pgid} did not stop`);
}

const WATCH_GROUP = fileURLToPath(new URL("../../scripts/watch-group.cjs", import.meta.url));

/**
 * Starts scripts/watch-group.cjs for a broker's group: it ends the group and removes `dir` when this
 * process exits without stopping the broker (an interrupted or killed run), and holds nothing open here.
 */
function watchGroup(pgid: number, dir: string): ChildProcess {
  const watcher = spawn(process.execPath, [WATCH_GROUP, String(pgid), dir], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
  });
  watcher.on("error", () => {});
  watcher.stdin?.on("error", () => {});
  (watcher.stdin as Socket | null)?.unref();
  watcher.unref();
  return watcher;
}

interface ProcessBrokerSpec {
  what: string;
  dir: string;
  port: number;
  url: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  ready: RegExp;
  startTimeoutMs: number;
}

function processBroker(spec: ProcessBrokerSpec): ProcessBroker & { started: Promise<void> } {
  let child: ChildProcess | null = null;
  const start = async () => {
    child = spawn(spec.command, spec.args, {
      env: { ...process.env, ...spec.env },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    if (child.pid) watchGroup(child.pid, spec.dir);
    try {
      await waitForLine(child, spec.ready, spec.what, spec.startTimeoutMs);
    } catch (err) {
      await endGroup(child, "SIGKILL");
      throw err;
    }
    // Read and drop the rest, so a chatty broker never blocks on a full pipe.
    child.stdout?.resume();
    child.stderr?.resume();
  };
  const signal = (sig: NodeJS.Signals) => {
    if (child?.pid) process.kill(-child.pid, sig);
  };
  return {
    url: spec.url,
    port: spec.port,
    started: start(),
    start,
    stop: () => endGroup(child),
    freeze: async () => {
      signal("SIGSTOP");
      if (child?.pid) await groupStopped(child.pid);
    },
    thaw: () => signal("SIGCONT"),
    close: async () => {
      await endGroup(child);
      rmSync(spec.dir, { recursive: true, force: true });
    },
  };
}

/**
 * A RabbitMQ node of its own (Debian's rabbitmq-server, run directly: the /usr/sbin wrapper
 * switches to the rabbitmq user): its own node name, mnesia and log directories, Erlang cookie
 * (HOME), AMQP and distribution ports, no plugins. The default `guest` user connects from loopback.
 * `vhosts` are created at boot (a definitions file), each open to `guest`, beside the default `/`.
 */
export async function startRabbit(vhosts: readonly string[] = []): Promise<ProcessBroker> {
  if (!existsSync(RABBITMQ_SERVER)) throw missing(`RabbitMQ (${RABBITMQ_SERVER})`);
  const dir = mkdtempSync(join(tmpdir(), "genrelay-rabbit-"));
  if (vhosts.length > 0) {
    // Definitions loaded at boot replace the default user, so `guest` is defined again (its SHA-256 hash).
    const salt = randomBytes(4);
    const hash = Buffer.concat([salt, createHash("sha256").update(salt).update("guest").digest()]).toString("base64");
    const all = ["/", ...vhosts];
    const definitions = {
      users: [
        {
          name: "guest",
          password_hash: hash,
          hashing_algorithm: "rabbit_password_hashing_sha256",
          tags: ["administrator"],
        },
      ],
      vhosts: all.map((name) => ({ name })),
      permissions: all.map((vhost) => ({ user: "guest", vhost, configure: ".*", write: ".*", read: ".*" })),
    };
    writeFileSync(join(dir, "definitions.json"), JSON.stringify(definitions));
    writeFileSync(join(dir, "rabbitmq.conf"), `load_definitions = ${join(dir, "definitions.json")}\n`);
  }
  const port = await freePort();
  const distPort = await freePort();
  const broker = processBroker({
    what: "rabbitmq-server",
    dir,
    port,
    url: `amqp://guest:guest@127.0.0.1:${port}`,
    command: RABBITMQ_SERVER,
    args: [],
    env: {
      HOME: dir,
      RABBITMQ_NODENAME: `genrelay${port}@localhost`,
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
    ready: /Server startup complete/,
    startTimeoutMs: 60_000,
  });
  await broker.started;
  return broker;
}

/** A NATS server with JetStream (`-js`), its own store directory, on a free loopback port. */
export async function startNats(): Promise<ProcessBroker> {
  const bin = whichNats();
  if (!bin) throw missing("nats-server");
  const dir = mkdtempSync(join(tmpdir(), "genrelay-nats-"));
  const port = await freePort();
  const broker = processBroker({
    what: "nats-server",
    dir,
    port,
    url: `nats://127.0.0.1:${port}`,
    command: bin,
    args: ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", dir],
    ready: /Server is ready/,
    startTimeoutMs: 20_000,
  });
  await broker.started;
  return broker;
}

export interface SqsBroker extends Broker {
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

/**
 * An SQS-compatible server in this process (local-aws-sqs: the JSON protocol the AWS SDK v3
 * speaks, message-attribute MD5s, FIFO queues with de-duplication), on a free loopback port.
 * Its queues and messages live in one service object that outlives the HTTP server: stop() closes
 * the server and its connections, start() listens again on the same port with the same queues,
 * as an SQS endpoint that was unreachable for a while and came back.
 */
export async function startSqs(): Promise<SqsBroker> {
  const port = await freePort();
  const { requestHandler } = createRequestHandler({
    port,
    hostname: "127.0.0.1",
    emulateQueueCreationLifecycle: false,
  });
  let server: Server | null = null;
  const sockets = new Set<Socket>();
  const start = async () => {
    const s = createHttpServer(requestHandler);
    s.on("connection", (socket: Socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      s.once("error", reject);
      s.listen(port, "127.0.0.1", () => resolve());
    });
    server = s;
  };
  const stop = async () => {
    const s = server;
    server = null;
    if (!s) return;
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  };
  await start();
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    region: "us-east-1",
    accessKeyId: "test",
    secretAccessKey: "test",
    start,
    stop,
    close: stop,
  };
}

/** An SQS client of the test's own (creating queues, consuming) against the in-process server. */
export function sqsClientOf(sqs: SqsBroker): SQSClient {
  return new SQSClient({
    region: sqs.region,
    endpoint: sqs.url,
    credentials: { accessKeyId: sqs.accessKeyId, secretAccessKey: sqs.secretAccessKey },
  });
}

/** The body of POST /openapi/v1/webhooks/endpoints for an sqs endpoint on the in-process server. */
export function sqsEndpointBody(sqs: SqsBroker, queueUrl: string) {
  return {
    type: "sqs",
    queue_url: queueUrl,
    region: sqs.region,
    access_key_id: sqs.accessKeyId,
    secret_access_key: sqs.secretAccessKey,
    endpoint: sqs.url,
  };
}

/**
 * A TCP server on loopback that accepts connections and never answers: a broker that stalls
 * (the connect handshake or a publish never completes). close() ends it and its sockets.
 */
export async function blackHole(): Promise<{ port: number; accepted: () => number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    accepted: () => accepted,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A signed queue message as the dispatcher hands it to a destination (the secret: the client's `whsec_…`). */
export function signedMessage(secret: string, fields: Partial<QueueMessage> = {}): QueueMessage {
  const id = fields.id ?? `evt_${randomUUID().replaceAll("-", "")}`;
  const body =
    fields.body ?? JSON.stringify({ id, type: "task.succeeded", timestamp: new Date().toISOString(), data: {} });
  return {
    tenant: "cli_test",
    id,
    type: "task.succeeded",
    taskId: "task_test",
    body,
    headers: queueHeaders(webhookHeaders([secret], id, Math.floor(Date.now() / 1000), body)),
    ...fields,
  };
}

/** The run's RabbitMQ as one file sees it: its virtual host, through a door of its own (`sharedRabbit`). */
export interface SharedBroker extends ProcessBroker {
  readonly vhost: string;
}

/**
 * What a stopping RabbitMQ sends each client before it closes the socket: `connection.close`
 * (channel 0, class 10 method 50) with 320 CONNECTION_FORCED, as a node that shuts down says it.
 */
function amqpShutdownFrame(): Buffer {
  const text = Buffer.from("CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'");
  const args = Buffer.alloc(2 + 2 + 1 + text.length + 4);
  args.writeUInt16BE(10, 0);
  args.writeUInt16BE(50, 2);
  args.writeUInt16BE(320, 4);
  args.writeUInt8(text.length, 6);
  text.copy(args, 7);
  // class-id and method-id of the cause: 0, 0.
  const frame = Buffer.alloc(7 + args.length + 1);
  frame.writeUInt8(1, 0);
  frame.writeUInt16BE(0, 1);
  frame.writeUInt32BE(args.length, 3);
  args.copy(frame, 7);
  frame.writeUInt8(0xce, 7 + args.length);
  return frame;
}

/**
 * A loopback port of the test's own in front of a broker it shares: each connection is passed
 * through to the broker, and the port acts as the broker's own would when it goes away (stop:
 * `farewell` to each client, its connections cut, new ones refused until start) or stalls
 * (freeze: connections stay open and nothing passes either way, new ones included, until thaw).
 */
async function brokerDoor(target: number, farewell: Buffer | null): Promise<Omit<ProcessBroker, "url">> {
  const pairs = new Set<{ client: Socket; upstream: Socket | null }>();
  let frozen = false;
  let held: Array<() => void> = [];
  const pass = (from: Socket, to: () => Socket | null) =>
    from.on("data", (chunk: Buffer) => {
      const send = () => to()?.write(chunk);
      if (frozen) held.push(send);
      else send();
    });
  const open = (pair: { client: Socket; upstream: Socket | null }) => {
    const upstream = netConnect(target, "127.0.0.1");
    pair.upstream = upstream;
    const end = () => {
      pair.client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    upstream.on("error", end).on("close", end);
    pair.client.on("close", end);
    pass(upstream, () => pair.client);
  };
  const server = createServer((client) => {
    const pair = { client, upstream: null as Socket | null };
    pairs.add(pair);
    client.on("error", () => client.destroy());
    pass(client, () => pair.upstream);
    if (frozen) held.push(() => open(pair));
    else open(pair);
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
  await listen(0);
  const port = (server.address() as { port: number }).port;
  const stop = async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    frozen = false;
    held = [];
    for (const { client, upstream } of pairs) {
      upstream?.destroy();
      if (!farewell) client.destroy();
      else {
        // The client answers close-ok and hangs up; one that does not is cut a moment later.
        client.end(farewell);
        setTimeout(() => client.destroy(), 1_000).unref();
      }
    }
    pairs.clear();
    await closed;
  };
  return {
    port,
    stop,
    start: () => listen(port),
    close: stop,
    freeze: async () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
      for (const send of held.splice(0)) send();
    },
  };
}

/**
 * The run's RabbitMQ (test/setup/rabbitmq.ts starts one node when a file first asks, with a
 * virtual host for each file that does), behind a door of this file's own: stop, start, freeze
 * and thaw act on this file's connections as they would on a node of its own, and close shuts the
 * door only. A node's boot costs about 4.6 s of CPU (Erlang), more than most of these files' tests.
 */
export async function sharedRabbit(): Promise<SharedBroker> {
  const { port, vhost } = await askRabbitSetup();
  const door = await brokerDoor(port, amqpShutdownFrame());
  return { ...door, vhost, url: `amqp://guest:guest@127.0.0.1:${door.port}/${encodeURIComponent(vhost)}` };
}

/** One line to the global setup's loopback control port, one JSON line back (a socket, so msw never sees it). */
function askRabbitSetup(): Promise<{ port: number; vhost: string }> {
  return new Promise((resolve, reject) => {
    const socket = netConnect(inject("rabbitControlPort"), "127.0.0.1");
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      answer += chunk;
    });
    socket.on("error", reject);
    socket.on("end", () => {
      try {
        const parsed = JSON.parse(answer) as { port: number; vhost: string } | { error: string };
        if ("error" in parsed) reject(new Error(parsed.error));
        else resolve(parsed);
      } catch {
        reject(new Error(`test/setup/rabbitmq.ts answered ${JSON.stringify(answer)}`));
      }
    });
    socket.end("vhost\n");
  });
}

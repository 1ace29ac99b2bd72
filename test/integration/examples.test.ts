import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../helpers/doc-blocks.js";
import { startLiveRelay, type LiveRelay } from "../helpers/live-relay.js";
import { startReceiver, type Received } from "../helpers/receiver.js";

/**
 * The programs under examples/ (shown in README.md and docs/, kept equal to these files by
 * test/unit/doc-blocks.test.ts) run as written against a real relay on loopback: each receiver
 * verifies the webhook of a real task created by examples/create-task.sh, and refuses a real signed
 * message that was tampered with or signed for another client.
 */

const EXAMPLES = join(ROOT, "examples");
const run = promisify(execFile);

/** jwks: an Ed25519 client whose receiver takes its keys from the published JWKS. */
type Scheme = "hmac" | "ed25519" | "jwks";
interface ReceiverExample {
  file: string;
  command: string;
  scheme: Scheme;
  /** Why it cannot run on this machine, or null. */
  missing: string | null;
}

const RECEIVERS: ReceiverExample[] = [
  { file: "receive-hmac.mjs", command: process.execPath, scheme: "hmac", missing: null },
  { file: "receive-ed25519.mjs", command: process.execPath, scheme: "ed25519", missing: null },
  { file: "receive_hmac.py", command: "python3", scheme: "hmac", missing: pythonMissing() },
  { file: "receive_ed25519.py", command: "python3", scheme: "ed25519", missing: pythonMissing("cryptography") },
  { file: "verify-jwks.mjs", command: process.execPath, scheme: "jwks", missing: null },
  { file: "verify_jwks.py", command: "python3", scheme: "jwks", missing: pythonMissing("cryptography") },
];
const SCRIPTS = ["create-task.sh"];
/** Run against real brokers by examples-queues.test.ts. */
const QUEUE_CONSUMERS = ["consume-amqp.mjs", "consume-nats.mjs", "sqs-lambda-handler.mjs"];

let live: LiveRelay;
const running: ExampleProcess[] = [];

beforeAll(async () => {
  live = await startLiveRelay();
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.stop()));
});
afterAll(async () => {
  await live?.close();
});

it("runs every file under examples/", () => {
  const ran = [...RECEIVERS.map((r) => r.file), ...SCRIPTS, ...QUEUE_CONSUMERS].sort();
  expect(
    readdirSync(EXAMPLES)
      .filter((f) => !f.startsWith(".") && f !== "__pycache__")
      .sort(),
  ).toEqual(ran);
});

describe.each(RECEIVERS)("examples/$file", ({ file, command, scheme, missing }) => {
  if (missing) console.warn(`examples/${file} not run: ${missing}`);

  it.skipIf(missing !== null)(
    "verifies a real task's webhook, handles each event once, and refuses a tampered or foreign one",
    async () => {
      const client = await newClient(scheme);
      const example = await startExample(command, file, exampleEnv(scheme, client));

      // examples/create-task.sh, as the README runs it, with its webhook going to the example.
      const created = await run("sh", [join(EXAMPLES, "create-task.sh")], {
        env: { PATH: process.env.PATH, RELAY: live.url, GENRELAY_API_KEY: client.apiKey, CALLBACK_URL: example.url },
      });
      const taskId = /"id":"(task_[a-z0-9]+)"/.exec(created.stdout)?.[1];
      expect(taskId, created.stdout + created.stderr).toBeDefined();
      expect(created.stdout).toContain('"status":"queued"');
      expect(created.stdout).toContain('"order_id":"1234"');
      const succeeded = await example.line((l) => l.type === "task.succeeded" && l.data?.id === taskId, {
        failOnRejection: true,
      });
      expect(succeeded.data).toMatchObject({
        id: taskId,
        status: "succeeded",
        metadata: { order_id: "1234" },
        usage: { points_charged: expect.any(Number) },
      });
      expect(succeeded.data.output).not.toBeNull();

      // A real signed message, captured on its way to a recorder, then replayed to the example.
      const ping = await capturedPing(client.apiKey);
      const pingId = ping.headers["webhook-id"];
      const tampered = ping.body.replace('"type":"ping"', '"type":"ping","extra":true');
      expect(tampered).not.toBe(ping.body);
      expect(await replay(example.url, ping, tampered)).toBe(400);
      const otherClient = await newClient(scheme);
      const foreign = await capturedPing(otherClient.apiKey);
      expect(await replay(example.url, foreign)).toBe(400);
      expect(
        await replay(example.url, { ...ping, headers: { ...ping.headers, "webhook-signature": signatureOf(foreign) } }),
      ).toBe(400);
      expect(example.handled.map((l) => l.id)).not.toContain(pingId);

      // The genuine message is handled once, however often it comes.
      expect(await replay(example.url, ping)).toBe(204);
      expect(await replay(example.url, ping)).toBe(204);
      expect((await example.line((l) => l.id === pingId)).type).toBe("ping");
      // The relay's own test event, sent after the replays, proves the second replay printed nothing.
      const direct = await api(client.apiKey, "POST", "/openapi/v1/webhooks/test", {
        url: example.url,
        type: "task.failed",
      });
      expect(direct.data).toMatchObject({ succeeded: true, status_code: 204 });
      await example.line((l) => l.type === "task.failed" && l.data?.sample === true);
      expect(example.handled.filter((l) => l.id === pingId)).toHaveLength(1);
      expect(example.errors.filter((l) => l.startsWith("rejected"))).toHaveLength(3);
    },
  );
});

describe("examples/verify-jwks.mjs for an hmac client (issue #39)", () => {
  it("prints why the relay has no keys for it and exits 1, without a stack trace", async () => {
    const client = await newClient("hmac");
    const failed = await run(process.execPath, [join(EXAMPLES, "verify-jwks.mjs")], {
      env: { PATH: process.env.PATH, ...exampleEnv("jwks", client), PORT: "0" },
    }).then(
      () => null,
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
    expect(failed).toMatchObject({
      code: 1,
      stdout: "",
      stderr:
        'cannot start: the JWKS answered 404: No published keys for this client id: it is unknown, revoked, or signs with hmac (v1 signatures, verified with its whsec_ secret, not with keys). A client switches to Ed25519 with PUT /openapi/v1/webhooks/settings {"signature":"ed25519"}; its keys are published here from then on.\n',
    });
  });
});

// --- the relay's side ---------------------------------------------------------------------

async function api(apiKey: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${live.url}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${apiKey}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  expect(res.status, `${method} ${path}`).toBeLessThan(300);
  return res.json();
}

/** What an example is told: the client's secret, its public key, or where its published keys are. */
function exampleEnv(
  scheme: Scheme,
  client: { id: string; secret: string; publicKey?: string },
): Record<string, string> {
  if (scheme === "hmac") return { GENRELAY_WEBHOOK_SECRET: client.secret };
  if (scheme === "ed25519") return { GENRELAY_PUBLIC_KEY: client.publicKey! };
  return { GENRELAY_JWKS_URL: `${live.url}/openapi/v1/webhooks/jwks/${client.id}` };
}

/** A client of the live relay, signing with `scheme` (an Ed25519 client's public key read from its settings). */
async function newClient(scheme: Scheme): Promise<{ id: string; apiKey: string; secret: string; publicKey?: string }> {
  const client = live.client(`examples-${scheme}`);
  if (scheme === "hmac") return client;
  const settings = await api(client.apiKey, "PUT", "/openapi/v1/webhooks/settings", { signature: "ed25519" });
  expect(settings.data.public_key).toMatch(/^whpk_/);
  return { ...client, publicKey: settings.data.public_key as string };
}

/** A ping the relay signed and sent for the client, as a recorder received it. */
async function capturedPing(apiKey: string): Promise<Received> {
  const recorder = await startReceiver();
  try {
    const next = recorder.next();
    await api(apiKey, "POST", "/openapi/v1/webhooks/test", { url: recorder.url() });
    return await next;
  } finally {
    await recorder.close();
  }
}

function signatureOf(req: Received): string {
  return req.headers["webhook-signature"]!;
}

/** Sends a captured message (or another body under its headers) to the example; its answer's status. */
async function replay(url: string, req: Received, body: string = req.body): Promise<number> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) headers[name] = req.headers[name]!;
  const res = await fetch(url, { method: "POST", headers, body });
  await res.arrayBuffer();
  return res.status;
}

// --- the example's side -------------------------------------------------------------------

interface ExampleProcess {
  url: string;
  /** The events it printed (one JSON line each). */
  handled: any[];
  /** Its stderr lines. */
  errors: string[];
  /**
   * Resolves with the first printed event that matches (already printed, or the next); rejects if
   * the process exits first or, with failOnRejection, as soon as it refuses a message meanwhile.
   */
  line(match: (event: any) => boolean, opts?: { failOnRejection?: boolean }): Promise<any>;
  stop(): Promise<void>;
}

/** Starts an example receiver on 127.0.0.1 and a free port, resolving once it says where it listens. */
async function startExample(command: string, file: string, env: Record<string, string>): Promise<ExampleProcess> {
  const child: ChildProcess = spawn(command, [join(EXAMPLES, file)], {
    env: { PATH: process.env.PATH, PYTHONDONTWRITEBYTECODE: "1", PORT: "0", HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const handled: any[] = [];
  const errors: string[] = [];
  const waiters: Array<{
    match: (e: any) => boolean;
    resolve: (e: any) => void;
    reject: (err: Error) => void;
    failOnRejection: boolean;
  }> = [];
  let listening: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => (listening = resolve));
  let exit: Error | null = null;
  const exited = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      exit = new Error(`examples/${file} exited (${code ?? signal}):\n${errors.join("\n")}`);
      for (const w of waiters.splice(0)) w.reject(exit);
      resolve();
    }),
  );
  createInterface({ input: child.stderr! }).on("line", (l) => {
    errors.push(l);
    for (const w of waiters.filter((x) => x.failOnRejection)) {
      waiters.splice(waiters.indexOf(w), 1);
      w.reject(new Error(`examples/${file} refused a genuine message: ${l}`));
    }
  });
  createInterface({ input: child.stdout! }).on("line", (l) => {
    const at = /^listening on (http:\/\/\S+)$/.exec(l);
    if (at) return listening(at[1]!);
    const event = JSON.parse(l) as unknown;
    handled.push(event);
    for (const w of waiters.filter((x) => x.match(event))) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(event);
    }
  });
  const example: ExampleProcess = {
    url: await Promise.race([url, exited.then(() => Promise.reject(exit!))]),
    handled,
    errors,
    line(match, { failOnRejection = false } = {}) {
      const seen = handled.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      if (exit) return Promise.reject(exit);
      return new Promise((resolve, reject) => waiters.push({ match, resolve, reject, failOnRejection }));
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
  running.push(example);
  return example;
}

/** Why python3 (with `module`) cannot run here, or null. */
function pythonMissing(module?: string): string | null {
  try {
    execFileSync("python3", ["-c", module ? `import ${module}` : "pass"], { stdio: "ignore" });
    return null;
  } catch {
    return module ? `python3 with the ${module} package is not installed` : "python3 is not installed";
  }
}

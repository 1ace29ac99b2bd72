import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest, type ClientRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { systemClock } from "../../src/clock.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { DIST, startNode, type Child } from "./process.js";
import { insertTestClient } from "../helpers/relay.js";

/**
 * SIGTERM under load, against the built relay as a process (sandbox mode: nothing else to start).
 * Each request sends its headers with `Expect: 100-continue`; Node answers `100 Continue` once it
 * has parsed them, which tells the test the request is in the server's hands. The signal goes only
 * then, and the bodies only after the relay says it is shutting down: every request is in flight
 * across the shutdown, deterministically, with no sleep.
 */
const built = existsSync(join(DIST, "main.js"));
const CONCURRENT = 50;

let dir: string;
let env: Record<string, string>;
let apiKey: string;
const children: Child[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "genrelay-shutdown-"));
  env = { PORT: "0", DATABASE_PATH: join(dir, "relay.db"), LOG_LEVEL: "info" };
  const database = openDatabase(env.DATABASE_PATH!);
  apiKey = insertTestClient(database.db, systemClock, { name: "shutdown" }).apiKey;
  database.close();
});

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
  rmSync(dir, { recursive: true, force: true });
});

async function startRelay(): Promise<{ child: Child; port: number }> {
  const child = startNode("main.js", env);
  children.push(child);
  const line = (await child.waitForLine(/"msg":"genrelay listening"/)).input;
  return { child, port: Number(/"port":(\d+)/.exec(line)![1]) };
}

/** The exit code, once the process has exited by itself (sends no signal). */
function exitOf(child: Child): Promise<number | null> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return Promise.resolve(child.proc.exitCode);
  return new Promise((resolve) => child.proc.once("exit", (code) => resolve(code)));
}

interface Outcome {
  status?: number;
  body?: string;
  error?: string;
}

/** One creation on its own connection; resolves `headersIn` at `100 Continue`, sends the body on `send()`. */
function slowCreation(port: number, i: number) {
  const body = JSON.stringify({ model: "p-image", mode: "generate", prompt: `shutdown check ${i}`, count: 1 });
  let req!: ClientRequest;
  const headersIn = new Promise<void>((resolve) => {
    req = httpRequest({
      host: "127.0.0.1",
      port,
      method: "POST",
      path: "/openapi/v1/images/generations",
      agent: false,
      headers: {
        Authorization: `Bearer ${apiKey}`,
        "Content-Type": "application/json",
        "Content-Length": Buffer.byteLength(body),
        "Idempotency-Key": `shutdown-key-${i}`,
        Expect: "100-continue",
      },
    });
    req.once("continue", resolve);
  });
  const outcome = new Promise<Outcome>((resolve) => {
    req.once("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode!, body: text }));
      res.on("error", (err) => resolve({ error: err.message }));
    });
    req.once("error", (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
  });
  req.flushHeaders();
  return { headersIn, outcome, send: () => req.end(body) };
}

describe.skipIf(!built)("SIGTERM under load (built relay as a process)", () => {
  it("answers every request in flight, stops accepting, exits 0, and keeps every 201 task", async () => {
    const { child, port } = await startRelay();
    const requests = Array.from({ length: CONCURRENT }, (_, i) => slowCreation(port, i));
    await Promise.all(requests.map((r) => r.headersIn));

    child.proc.kill("SIGTERM");
    await child.waitForLine(/"msg":"shutting down/);
    // No new connections once shutdown has begun.
    const refused = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (res) => `HTTP ${res.status}`,
      (err: Error & { cause?: { code?: string } }) => err.cause?.code ?? err.message,
    );
    expect(refused).toBe("ECONNREFUSED");

    for (const r of requests) r.send();
    const outcomes = await Promise.all(requests.map((r) => r.outcome));
    expect(outcomes.filter((o) => o.error !== undefined)).toEqual([]);
    expect(outcomes.map((o) => o.status)).toEqual(Array(CONCURRENT).fill(201));
    expect(await exitOf(child)).toBe(0);
    expect(child.lines.join("\n")).toMatch(/"msg":"stopped"/);

    // After a restart, every acknowledged task is there.
    const ids = outcomes.map((o) => (JSON.parse(o.body!) as { data: { id: string } }).data.id);
    const again = await startRelay();
    for (const id of ids) {
      const res = await fetch(`http://127.0.0.1:${again.port}/openapi/v1/tasks/${id}`, {
        headers: { Authorization: `Bearer ${apiKey}` },
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { data: { id: string } }).data.id).toBe(id);
    }
    expect(await again.child.kill("SIGTERM")).toBe(0);
  }, 60_000);

  it("a second signal exits at once with code 1", async () => {
    const { child, port } = await startRelay();
    // A request held open (headers in, no body) keeps the first shutdown waiting.
    const held = slowCreation(port, 0);
    await held.headersIn;
    child.proc.kill("SIGTERM");
    await child.waitForLine(/"msg":"shutting down/);
    child.proc.kill("SIGTERM");
    expect(await exitOf(child)).toBe(1);
    expect(child.lines.join("\n")).toMatch(/"msg":"second signal: exiting now"/);
    expect((await held.outcome).error).toBeDefined();
  }, 30_000);
});

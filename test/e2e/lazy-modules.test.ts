import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUILT, ROOT, startNode } from "./process.js";

/**
 * src/lazy.ts: a relay's start loads only what every relay uses. The built relay in its default
 * configuration (sandbox, SQLite, no bucket, no queue endpoint, tracing off) starts with a loader hook
 * logging every module it resolves; none of the libraries loaded only when configured is among them.
 * Each costs a fraction of a second of CPU at every start (docs/testing.md, "Time").
 */
const CONFIGURED_ONLY: Record<string, RegExp> = {
  "the S3 SDK (a bucket)": /\/node_modules\/@aws-sdk\/(client-s3|lib-storage|s3-request-presigner)\//,
  "the SQS SDK (an sqs endpoint)": /\/node_modules\/@aws-sdk\/client-sqs\//,
  "amqplib (an amqp endpoint)": /\/node_modules\/amqplib\//,
  "the NATS client (a nats endpoint)": /\/node_modules\/@nats-io\//,
  "pg (DATABASE_URL)": /\/node_modules\/pg\//,
  "the PostgreSQL store (DATABASE_URL)": /\/dist\/db\/pg\/(store|open|failover)\.js$/,
  "the OpenTelemetry SDK (tracing on)": /\/node_modules\/@opentelemetry\/sdk-node\//,
};

/**
 * Waits for the relay's "listening" line for as long as its start makes progress: the loader hook
 * appends each module it resolves to `log`, so a start that is slow (a loaded machine) keeps growing
 * it, and one that hangs stops. Fails when the log has not grown for STALL_MS, or the process exits.
 */
const STALL_MS = 10_000;
async function untilListening(child: ReturnType<typeof startNode>, log: string): Promise<void> {
  const size = () => (existsSync(log) ? statSync(log).size : 0);
  let seen = -1;
  for (;;) {
    try {
      await child.waitForLine(/"msg":"genrelay listening"/, STALL_MS);
      return;
    } catch (err) {
      if (child.proc.exitCode !== null || child.proc.signalCode !== null) throw err;
      const now = size();
      if (now === seen) throw err;
      seen = now;
    }
  }
}

describe.skipIf(!BUILT)("a default relay start (built relay)", () => {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-lazy-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // The bound is for a hang only: a slow start is waited for while it progresses (untilListening).
  it("loads none of the libraries a relay uses only when configured", { timeout: 180_000 }, async () => {
    const log = join(dir, "modules.log");
    const register = join(ROOT, "test", "e2e", "loaded-modules", "register.mjs");
    const child = startNode(
      "main.js",
      { HOST: "127.0.0.1", PORT: "0", DATABASE_PATH: join(dir, "relay.db"), GENRELAY_MODULE_LOG: log },
      ["--import", register],
    );
    try {
      await untilListening(child, log);
    } finally {
      await child.kill("SIGTERM");
    }
    const urls = readFileSync(log, "utf8").split("\n");
    // The log works: the modules every relay needs are in it.
    expect(urls.some((u) => u.includes("/node_modules/better-sqlite3/"))).toBe(true);
    expect(urls.some((u) => u.endsWith("/dist/relay.js"))).toBe(true);
    const loaded = Object.entries(CONFIGURED_ONLY)
      .filter(([, re]) => urls.some((u) => re.test(u)))
      .map(([name]) => name);
    expect(loaded).toEqual([]);
  });
});

import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { transitionRules } from "../../src/core/transition.js";
import { migratePostgres } from "../../src/db/pg/open.js";
import { PgStore } from "../../src/db/pg/store.js";
import { silentLogger } from "../../src/logger.js";
import { Relay } from "../../src/relay.js";
import { newClient } from "../../src/services/clients.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { startPgServer, type PgServer } from "../helpers/pg-server.js";

/**
 * Issue #22, item 5: a PostgreSQL outage answers 503 storage_unavailable with Retry-After (never
 * 500), never crashes the process, and never makes a request wait without bound. This file runs
 * its own embedded PostgreSQL (the suite's shared one must not be stopped or frozen), through
 * test/helpers/pg-server.ts as test/setup/postgres.ts does.
 */

const MAX_CONNECTIONS = 12;
let server: PgServer;
let url = "";

beforeAll(async () => {
  server = await startPgServer({
    name: "pg-outage",
    flags: [
      "-c",
      "fsync=off",
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      `max_connections=${MAX_CONNECTIONS}`,
      "-c",
      "superuser_reserved_connections=0",
      "-c",
      "reserved_connections=0",
    ],
  });
  url = server.url;
  await migratePostgres(url);
}, 60_000);

afterAll(async () => {
  signalAll("SIGCONT");
  await Promise.race([server?.close(), new Promise((r) => setTimeout(r, 10_000))]);
});

/** The postmaster and its backends: only the processes of this file's own server. */
function serverPids(): number[] {
  const postmaster = server.postmasterPid();
  const children = readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        const stat = readFileSync(`/proc/${d}/stat`, "utf8");
        return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === postmaster;
      } catch {
        return false;
      }
    })
    .map(Number);
  return [postmaster, ...children];
}

function signalAll(signal: NodeJS.Signals): void {
  if (!server) return;
  let pids: number[] = [];
  try {
    pids = serverPids();
  } catch {
    return;
  }
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // gone already
    }
  }
}

async function relayOn(limits: { connectTimeoutMs: number; statementTimeoutMs: number }) {
  const clock = new FakeClock();
  const store = new PgStore({ connectionString: url, max: 4, ...limits }, transitionRules);
  const config = loadConfig({ DATABASE_URL: url, UPSTREAM_BASE_URL: "http://upstream.invalid", UPSTREAM_API_KEY: "k" });
  const relay = new Relay({
    config,
    store,
    clock,
    logger: silentLogger,
    upstream: { baseUrl: "http://upstream.invalid", apiKey: "k" },
  });
  // The client is written through a store of its own, so the relay's pool has not connected yet.
  const setup = new PgStore({ connectionString: url, max: 1 }, transitionRules);
  const { row, apiKey } = newClient(clock.now(), { name: `c-${Math.random()}` });
  await setup.clients.insert(row);
  await setup.close();
  let n = 0;
  const create = () =>
    Promise.resolve(
      relay.app.request("http://relay.test/openapi/v1/images/generations", {
        method: "POST",
        headers: {
          Authorization: `Bearer ${apiKey}`,
          "Content-Type": "application/json",
          "Idempotency-Key": `outage-key-${n++}`,
        },
        body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "a plain prompt", count: 1 }),
      }),
    );
  const read = () =>
    Promise.resolve(
      relay.app.request("http://relay.test/openapi/v1/tasks/task_nope", {
        headers: { Authorization: `Bearer ${apiKey}` },
      }),
    );
  return { store, relay, create, read };
}

async function expect503(res: Response): Promise<void> {
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("5");
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("storage_unavailable");
}

describe("PostgreSQL outages answer 503 storage_unavailable (issue #22)", () => {
  it("stopped: a connection that dies mid-transaction does not crash the process; requests get 503, then work again", async () => {
    const { store, create, read } = await relayOn({ connectTimeoutMs: 1_000, statementTimeoutMs: 5_000 });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    try {
      expect((await create()).status).toBe(201);
      // A transaction holding a checked-out connection when the server goes away.
      const held = store.tx((c) => c.query("SELECT pg_sleep(10)"));
      const settled = held.then(
        () => "resolved",
        (e: unknown) => e,
      );
      await new Promise((r) => setTimeout(r, 200));
      await server.stop();
      expect(await settled).toBeInstanceOf(Error);
      await expect503(await create());
      await expect503(await read());
      expect(uncaught).toEqual([]);
      await server.start();
      await expect.poll(async () => (await create()).status, { timeout: 10_000 }).toBe(201);
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", onUncaught);
      await store.close();
    }
  }, 60_000);

  it("frozen (SIGSTOP): requests answer 503 within the pool and statement limits, never hang", async () => {
    const { store, create, read } = await relayOn({ connectTimeoutMs: 500, statementTimeoutMs: 500 });
    try {
      expect((await create()).status).toBe(201);
      signalAll("SIGSTOP");
      const started = Date.now();
      await expect503(await create());
      await expect503(await read());
      // connect 0.5 s, or a statement 0.5 s plus the client's 5 s grace: well under a minute each.
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      signalAll("SIGCONT");
      await store.close();
    }
  }, 60_000);

  it("max_connections exhausted: 503, not 500", async () => {
    const hogs: pg.Client[] = [];
    const { store, create } = await relayOn({ connectTimeoutMs: 2_000, statementTimeoutMs: 2_000 });
    try {
      for (;;) {
        const c = new pg.Client({ connectionString: url });
        c.on("error", () => {});
        try {
          await c.connect();
          hogs.push(c);
        } catch {
          break;
        }
        if (hogs.length > MAX_CONNECTIONS + 2) throw new Error("max_connections not reached");
      }
      const results = await Promise.all(Array.from({ length: 5 }, () => create()));
      for (const res of results) await expect503(res);
    } finally {
      for (const c of hogs) await c.end().catch(() => {});
      await store.close().catch(() => {});
    }
  }, 60_000);
});

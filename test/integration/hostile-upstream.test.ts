import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { HttpResponse } from "msw";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { openDatabase } from "../../src/db/sqlite/open.js";
import { pgStore, sqliteStore } from "../../src/open-store.js";
import { Relay } from "../../src/relay.js";
import { newClient } from "../../src/services/clients.js";
import type { Store } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { FakeUpstream } from "../helpers/fake-upstream.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { UPSTREAM_KEY, UPSTREAM_URL, viaGlobalFetch } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Issue #22: an upstream (or a proxy before it) that answers wrongly never costs money, leaks one
 * client's output to another, leaves a task stuck or re-submitted, or takes the process's memory.
 * Each reproduction of the issue runs against a hostile fake upstream (msw) on both databases.
 */
const suite = upstreamSuite();
const cleanups = { push: (fn: () => Promise<void>) => suite.cleanup(fn) };

interface Harness {
  relay: Relay;
  store: Store;
  clock: FakeClock;
  up: FakeUpstream;
  logs: Array<Record<string, unknown>>;
  dbFile: string | null;
  client(name: string, creditLimit?: number): Promise<{ id: string; apiKey: string }>;
  create(apiKey: string, key: string, body?: Record<string, unknown>): Promise<Response>;
  task(apiKey: string, id: string): Promise<Record<string, unknown>>;
  /** Submitter and poller rounds with the clock moving on. */
  run(rounds: number): Promise<void>;
  tasks(): Promise<TaskRow[]>;
}

async function harness(dialect: "sqlite" | "postgres", env: Record<string, string> = {}): Promise<Harness> {
  const clock = new FakeClock();
  let store: Store;
  let dbFile: string | null = null;
  let url: string | undefined;
  if (dialect === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-hostile-"));
    dbFile = join(dir, "relay.db");
    store = sqliteStore(openDatabase(dbFile));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  } else {
    const db = await freshPgDatabase();
    url = db.url;
    store = await pgStore(db.url, { migrate: false, max: 4 });
    cleanups.push(() => db.drop());
  }
  const config = loadConfig({
    ...(url ? { DATABASE_URL: url } : { DATABASE_PATH: dbFile! }),
    UPSTREAM_BASE_URL: UPSTREAM_URL,
    UPSTREAM_API_KEY: UPSTREAM_KEY,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    ...env,
  });
  const logs: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split("\n"))
        if (line.trim() !== "") logs.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const relay = new Relay({
    config,
    store,
    clock,
    logger: pino({ level: "info" }, sink),
    upstream: { baseUrl: UPSTREAM_URL, apiKey: UPSTREAM_KEY },
    fetch: viaGlobalFetch,
  });
  cleanups.push(async () => {
    await relay.stop(1_000);
    await store.close();
  });
  const up = new FakeUpstream(clock);
  suite.server.use(...up.handlers());
  const request = (apiKey: string, path: string, init: { method?: string; json?: unknown; key?: string } = {}) =>
    Promise.resolve(
      relay.app.request(`http://relay.test${path}`, {
        method: init.method ?? "GET",
        headers: {
          Authorization: `Bearer ${apiKey}`,
          ...(init.json ? { "Content-Type": "application/json" } : {}),
          ...(init.key ? { "Idempotency-Key": init.key } : {}),
        },
        ...(init.json ? { body: JSON.stringify(init.json) } : {}),
      }),
    );
  return {
    relay,
    store,
    clock,
    up,
    logs,
    dbFile,
    async client(name, creditLimit) {
      const { row, apiKey } = newClient(clock.now(), { name, ...(creditLimit !== undefined ? { creditLimit } : {}) });
      const c = await store.clients.insert(row);
      return { id: c.id, apiKey };
    },
    create: (apiKey, key, body = { model: "flux-lite", mode: "generate", prompt: "a fox", count: 1 }) =>
      request(apiKey, "/openapi/v1/images/generations", { method: "POST", json: body, key: `hostile-key-${key}` }),
    async task(apiKey, id) {
      const body = (await (await request(apiKey, `/openapi/v1/tasks/${id}`)).json()) as {
        data: Record<string, unknown>;
        output: unknown;
        usage: unknown;
      };
      return { ...body.data, output: body.output, usage: body.usage };
    },
    async run(rounds) {
      for (let i = 0; i < rounds; i++) {
        await relay.submitter.runOnce();
        clock.advance(3_000);
        await relay.poller.runOnce();
        clock.advance(3_000);
      }
    },
    async tasks() {
      return store.tasks.listForSupport({ limit: 1000 });
    },
  };
}

const LIMIT = 200;

/** The client's books: spent (charged net of refunds) and reserved. */
async function books(h: Harness, clientId: string) {
  // The position, not the client row: on PostgreSQL the row holds only the ledger rolled up so far.
  const p = (await h.store.clients.creditPosition(clientId))!;
  return { spent: p.charged - p.refunded, reserved: p.reserved };
}

/** What the upstream charged in total for the tasks it created (its real price is 40 each). */
function upstreamCharged(h: Harness): number {
  return h.up.tasks.size * 40;
}

describe.each(["sqlite", "postgres"] as const)("a hostile upstream on %s (issue #22)", (dialect) => {
  it("usage only on single reads (none in creations or list items): the books hold every charge and the limit holds", async () => {
    const h = await harness(dialect);
    h.up.defaultUsage = { points_charged: 40 };
    h.up.usageOnlyOnSingleReads = true;
    const { id, apiKey } = await h.client("limited", LIMIT);
    for (let round = 0; round < 12; round++) {
      for (let k = 0; k < 4; k++) await h.create(apiKey, `k-${round}-${k}`);
      await h.run(2);
      h.up.finishAll("succeeded");
      for (const t of h.up.tasks.values()) t.output ??= { images: [`https://files.example/${t.id}.png`] };
      await h.run(2);
      const b = await books(h, id);
      expect(b.spent + b.reserved).toBeLessThanOrEqual(LIMIT);
    }
    await h.run(6);
    const b = await books(h, id);
    // Every point the upstream charged is on the books, and no more ran than the limit pays for.
    expect(b.spent).toBe(upstreamCharged(h));
    expect(upstreamCharged(h)).toBeLessThanOrEqual(LIMIT);
    expect(h.up.tasks.size).toBe(5);
  });

  it.each([
    ["a numeric string", "40", 40],
    ["a negative charge", -100_000, null],
    ["a fractional charge", 40.5, null],
    ["a charge beyond any integer column", 1e19, null],
    ["no charge at all", undefined, null],
  ])("%s: never read as free, the task ends and is submitted once", async (_name, charge, read) => {
    const h = await harness(dialect);
    h.up.defaultUsage = charge === undefined ? {} : { points_charged: charge };
    const { id, apiKey } = await h.client("limited", LIMIT);
    const res = await h.create(apiKey, "one");
    expect(res.status).toBe(201);
    const taskId = ((await res.json()) as { data: { id: string } }).data.id;
    await h.run(2);
    h.up.finishAll("succeeded");
    await h.run(3);
    const view = await h.task(apiKey, taskId);
    expect(view.status).toBe("succeeded");
    expect(h.up.creates).toHaveLength(1);
    const [row] = await h.tasks();
    // The first task of an unknown price held the whole room: that reservation is its charge
    // unless the upstream gave a charge the relay can trust.
    expect(row!.pointsCharged).toBe(read ?? LIMIT);
    expect(await books(h, id)).toEqual({ spent: read ?? LIMIT, reserved: 0 });
    // Nothing untrusted is learned as a price: the next task is still unpriced (it would take the room left).
    if (read === null) expect(await h.create(apiKey, "two")).toHaveProperty("status", 402);
  });

  it("a negative first charge gives no credit: later tasks are refused at the limit", async () => {
    const h = await harness(dialect);
    h.up.defaultUsage = { points_charged: -100_000 };
    const { id, apiKey } = await h.client("limited", LIMIT);
    await h.create(apiKey, "first");
    await h.run(2);
    h.up.finishAll("succeeded");
    await h.run(3);
    h.up.defaultUsage = { points_charged: 40 };
    for (let k = 0; k < 30; k++) await h.create(apiKey, `more-${k}`);
    await h.run(10);
    expect(h.up.tasks.size).toBe(1);
    expect((await books(h, id)).spent).toBe(LIMIT);
  });

  it("a creation answered with an id bound to another task ends failed upstream_conflict; B never sees A's output", async () => {
    const h = await harness(dialect);
    const alice = await h.client("alice");
    const bob = await h.client("bob");
    const a = (
      (await (
        await h.create(alice.apiKey, "a", {
          model: "p-image",
          mode: "generate",
          prompt: "alice private prompt",
          count: 1,
        })
      ).json()) as { data: { id: string } }
    ).data.id;
    await h.run(1);
    const upA = h.up.taskOf(a)!;
    h.up.set(upA.id, { status: "succeeded", output: { images: ["https://files.example/alice private prompt.png"] } });
    // Every further creation is answered with Alice's task.
    h.up.onCreate = () => HttpResponse.json(h.up.body(upA), { status: 201 });
    const b = (
      (await (
        await h.create(bob.apiKey, "b", { model: "p-image", mode: "generate", prompt: "bob", count: 1 })
      ).json()) as { data: { id: string } }
    ).data.id;
    await h.run(3);
    const bobView = await h.task(bob.apiKey, b);
    expect(bobView.status).toBe("failed");
    expect((bobView.error as { code: string }).code).toBe("upstream_conflict");
    expect(JSON.stringify(bobView)).not.toContain("alice");
    expect(h.up.creates.filter((c) => c.key === `genrelay-${b}`)).toHaveLength(1);
    const aliceView = await h.task(alice.apiKey, a);
    expect(aliceView.status).toBe("succeeded");
    expect(JSON.stringify(aliceView)).toContain("alice private prompt.png");
    // Logged as an upstream defect, at error level.
    expect(h.logs.some((l) => l.code === "upstream_conflict" && (l.level as number) >= 50 && l.bound_to === a)).toBe(
      true,
    );
  });

  it("a NUL in the upstream task id: the task ends failed at once, never re-submitted, never stuck", async () => {
    const h = await harness(dialect);
    const { apiKey } = await h.client("c");
    h.up.onCreate = () => HttpResponse.json({ data: { id: "up_\u0000x", status: "queued" } }, { status: 201 });
    const id = (
      (await (
        await h.create(apiKey, "nul", { model: "p-image", mode: "generate", prompt: "a plain prompt", count: 1 })
      ).json()) as { data: { id: string } }
    ).data.id;
    await h.run(5);
    const view = await h.task(apiKey, id);
    expect(view.status).toBe("failed");
    expect((view.error as { code: string }).code).toBe("upstream_invalid_response");
    expect(h.up.creates).toHaveLength(1);
  });
});

describe.each(["sqlite", "postgres"] as const)(
  "caller input with NUL or an oversized prompt on %s (issue #22, items 6-7)",
  (dialect) => {
    const body = (extra: Record<string, unknown>) => ({
      model: "p-image",
      mode: "generate",
      prompt: "a plain prompt",
      count: 1,
      ...extra,
    });

    it.each([
      ["prompt", { prompt: "a\u0000b prompt" }, "prompt"],
      ["a metadata value", { metadata: { order: "a\u0000b" } }, "metadata.order"],
      ["the model", { model: "p-image\u0000" }, "model"],
      ["an unknown passthrough field", { style: "x\u0000" }, "style"],
      ["a prompt over 32,768 characters", { prompt: "p".repeat(32_769) }, "prompt"],
    ])(
      "text with NUL in %s is 422 validation_error naming the field, and nothing is stored",
      async (_name, extra, field) => {
        const h = await harness(dialect);
        const { apiKey } = await h.client("c");
        const res = await h.create(apiKey, "nul-body", body(extra));
        expect(res.status).toBe(422);
        const err = ((await res.json()) as { error: { code: string; details: Array<{ field: string }> } }).error;
        expect(err.code).toBe("validation_error");
        expect(err.details.map((d) => d.field)).toContain(field);
        expect(await h.tasks()).toHaveLength(0);
      },
    );

    it("a prompt of exactly 32,768 characters is accepted", async () => {
      const h = await harness(dialect);
      const { apiKey } = await h.client("c");
      expect((await h.create(apiKey, "long-ok", body({ prompt: "p".repeat(32_768) }))).status).toBe(201);
    });

    it.each([
      ["GET", "/openapi/v1/tasks/task_%00"],
      ["POST", "/openapi/v1/tasks/task_%00/cancel"],
      ["GET", "/openapi/v1/tasks/task_%00/deliveries"],
      ["POST", "/openapi/v1/tasks/task_%00/redeliver"],
      ["GET", "/openapi/v1/tasks?cursor=a%00b"],
      ["GET", "/openapi/v1/events?after=a%00b"],
    ])("%s %s with NUL is 400 or 404, never a 500", async (method, path) => {
      const h = await harness(dialect);
      const { apiKey } = await h.client("c");
      const res = await h.relay.app.request(`http://relay.test${path}`, {
        method,
        headers: { Authorization: `Bearer ${apiKey}` },
      });
      expect([400, 404]).toContain(res.status);
    });
  },
);

describe("a 50 MB task answer (issue #22, item 3)", () => {
  it("is cut off at UPSTREAM_MAX_BODY_BYTES while streaming; the task ends failed and the database does not grow by it", async () => {
    const h = await harness("sqlite", { UPSTREAM_MAX_BODY_BYTES: "1MiB" });
    const { apiKey } = await h.client("c");
    const id = (
      (await (
        await h.create(apiKey, "big", { model: "p-image", mode: "generate", prompt: "a plain prompt", count: 1 })
      ).json()) as { data: { id: string } }
    ).data.id;
    await h.run(1);
    const upId = h.up.taskOf(id)!.id;
    let pulled = 0;
    const chunk = new TextEncoder().encode("a".repeat(64 * 1024));
    h.up.onRead = (call) => {
      if (call.id !== upId) return undefined;
      pulled = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          pulled += 1;
          if (pulled === 1)
            controller.enqueue(
              new TextEncoder().encode(
                `{"data":{"id":"${upId}","status":"succeeded"},"usage":{"points_charged":20},"output":{"text":"`,
              ),
            );
          else if (pulled <= 800) controller.enqueue(chunk);
          else {
            controller.enqueue(new TextEncoder().encode('"}}'));
            controller.close();
          }
        },
      });
      return new HttpResponse(stream, { status: 200, headers: { "Content-Type": "application/json" } });
    };
    const before = statSync(h.dbFile!).size;
    await h.run(4);
    const view = await h.task(apiKey, id);
    expect(view.status).toBe("failed");
    expect((view.error as { code: string }).code).toBe("upstream_response_too_large");
    expect(pulled).toBeLessThan(100);
    expect(statSync(h.dbFile!).size - before).toBeLessThan(1024 * 1024);
  });
});

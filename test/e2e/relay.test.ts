import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  BUILT,
  sqliteSetup,
  startReceiver,
  startRelayProcess,
  startSqliteSimulator,
  until,
  type Child,
  type SqliteSetup,
} from "./process.js";

/**
 * The built relay as a child process, against the simulator as its own process: the whole product
 * over real HTTP, including a SIGKILL in the middle of work and a restart on the same database.
 */

interface Setup extends SqliteSetup {
  dir: string;
}

describe.skipIf(!BUILT)("relay end to end (built, as processes)", () => {
  let setup: Setup;
  const children: Child[] = [];
  // One simulator for the tests that do not read its counts (a process start costs about 1 s of CPU).
  let sim: Awaited<ReturnType<typeof startSqliteSimulator>>;

  beforeAll(async () => {
    sim = await startSqliteSimulator();
  });
  afterAll(async () => {
    await sim?.simulator.kill("SIGKILL");
  });

  beforeEach(async () => {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-e2e-"));
    setup = { dir, ...(await sqliteSetup(dir, "e2e", sim)) };
  });

  afterEach(async () => {
    await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
    rmSync(setup.dir, { recursive: true, force: true });
  });

  async function create(relayUrl: string, kind: "image" | "video", i: number, callbackUrl: string): Promise<string> {
    const body =
      kind === "image"
        ? {
            model: "p-image",
            mode: "generate",
            prompt: `e2e image number ${i}`,
            count: 1,
            callback_url: callbackUrl,
            metadata: { i: String(i) },
          }
        : {
            model: "v-video",
            video_mode: "t2v",
            prompt: `e2e video number ${i}`,
            duration: 5,
            callback_url: callbackUrl,
            metadata: { i: String(i) },
          };
    const res = await fetch(`${relayUrl}/openapi/v1/${kind}s/generations`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${setup.apiKey}`,
        "Content-Type": "application/json",
        "Idempotency-Key": `e2e-${kind}-${i}`,
      },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  }

  async function upstreamTask(id: string): Promise<{ output: unknown; usage: unknown }> {
    const res = await fetch(`${setup.simUrl}/openapi/v1/tasks/${id}`, {
      headers: { Authorization: "Bearer e2e-upstream-key" },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { output: unknown; usage: unknown };
  }

  function verifiedTerminal(hooks: { headers: Record<string, unknown>; body: string }[]) {
    const wh = new Webhook(setup.secret);
    const byTask = new Map<string, { type: string; data: Record<string, unknown> }>();
    for (const hook of hooks) {
      const event = wh.verify(hook.body, {
        "webhook-id": String(hook.headers["webhook-id"]),
        "webhook-timestamp": String(hook.headers["webhook-timestamp"]),
        "webhook-signature": String(hook.headers["webhook-signature"]),
      }) as { type: string; data: Record<string, unknown> };
      byTask.set(String(event.data.id), event);
    }
    return byTask;
  }

  it("pushes a verified webhook for every image and video task, with the upstream's output and usage", async () => {
    const receiver = await startReceiver();
    const { child, url } = await startRelayProcess(setup.relayEnv);
    children.push(child);
    const ids = new Set<string>();
    for (let i = 0; i < 12; i++) ids.add(await create(url, i % 3 === 0 ? "video" : "image", i, receiver.url));
    await until(
      () => verifiedTerminal(receiver.hooks).size >= ids.size,
      receiver.onHook,
      60_000,
      () => `${receiver.hooks.length}/${ids.size} webhooks`,
    );
    const events = verifiedTerminal(receiver.hooks);
    for (const id of ids) {
      const event = events.get(id)!;
      expect(event.type).toBe("task.succeeded");
      expect(event.data.status).toBe("succeeded");
      const upstream = await upstreamTask(String(event.data.upstream_task_id));
      expect(event.data.output).toEqual(upstream.output);
      expect(event.data.usage).toEqual(upstream.usage);
      expect((event.data.metadata as Record<string, string>).i).toMatch(/^\d+$/);
    }
    await receiver.close();
  }, 90_000);

  it("survives SIGKILL mid-work: every accepted task gets its webhook and the upstream sees one creation per task", async () => {
    // This test reads the simulator's counts: a simulator and a database of its own.
    const own = join(setup.dir, "own-simulator");
    mkdirSync(own);
    setup = { dir: setup.dir, ...(await sqliteSetup(own, "e2e")) };
    children.push(setup.simulator);
    const receiver = await startReceiver();
    let relay = await startRelayProcess(setup.relayEnv);
    children.push(relay.child);
    const ids = new Set<string>();
    for (let i = 0; i < 30; i++) ids.add(await create(relay.url, i % 4 === 0 ? "video" : "image", i, receiver.url));
    // First kill: right after the last 201, while submissions are in flight.
    await relay.child.kill("SIGKILL");
    relay = await startRelayProcess(setup.relayEnv);
    children.push(relay.child);
    // Second kill: while polls and deliveries are under way, after the first webhook and before the last.
    await until(
      () => receiver.hooks.length >= 1,
      receiver.onHook,
      30_000,
      () => "first webhook",
    );
    expect(verifiedTerminal(receiver.hooks).size).toBeLessThan(ids.size);
    await relay.child.kill("SIGKILL");

    relay = await startRelayProcess(setup.relayEnv);
    children.push(relay.child);
    await until(
      () => [...ids].every((id) => verifiedTerminal(receiver.hooks).has(id)),
      receiver.onHook,
      60_000,
      () => `${verifiedTerminal(receiver.hooks).size}/${ids.size} tasks with webhooks`,
    );
    for (const event of verifiedTerminal(receiver.hooks).values()) expect(event.type).toBe("task.succeeded");

    const stats = (await (await fetch(`${setup.simUrl}/_sim/stats`)).json()) as {
      tasks_created: number;
      creations_per_key_max: number;
    };
    expect(stats.tasks_created).toBe(ids.size);
    expect(stats.creations_per_key_max).toBe(1);
    await receiver.close();
  }, 120_000);

  it("stops gracefully on SIGTERM and exits 0", async () => {
    const { child } = await startRelayProcess(setup.relayEnv);
    expect(await child.kill("SIGTERM")).toBe(0);
    expect(child.lines.join("\n")).toMatch(/"msg":"stopped"/);
  }, 30_000);

  it("starts in sandbox mode with nothing configured: a warning, and a task runs to its end", async () => {
    const env = { PORT: "0", DATABASE_PATH: setup.relayEnv.DATABASE_PATH!, WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" };
    const { child, url } = await startRelayProcess(env);
    children.push(child);
    expect(child.lines.join("\n")).toMatch(/SANDBOX MODE/);
    const res = await fetch(`${url}/openapi/v1/images/generations`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${setup.apiKey}`,
        "Content-Type": "application/json",
        "Idempotency-Key": "sandbox-e2e-1",
      },
      body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "sandbox check", count: 1 }),
    });
    expect(res.status).toBe(201);
    const id = ((await res.json()) as { data: { id: string } }).data.id;
    // The simulator's default image takes ~4 s: poll the relay's own read endpoint until it ends.
    let status = "queued";
    for (let i = 0; i < 60 && status !== "succeeded"; i++) {
      await new Promise((r) => setTimeout(r, 250));
      const read = (await (
        await fetch(`${url}/openapi/v1/tasks/${id}`, { headers: { Authorization: `Bearer ${setup.apiKey}` } })
      ).json()) as {
        data: { status: string };
      };
      status = read.data.status;
    }
    expect(status).toBe("succeeded");
  }, 30_000);
});

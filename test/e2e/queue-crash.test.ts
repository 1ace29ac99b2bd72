import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { type ProcessBroker, startNats } from "../helpers/brokers.js";
import { type Child, DIST, sqliteSetup, startRelayProcess, until } from "./process.js";

/**
 * The built relay as a process publishing to a queue endpoint (a real NATS JetStream): SIGKILLed
 * while it is publishing tasks' `task.succeeded`, then restarted on the same database. Every task's
 * message reaches the stream at least once, with its `webhook-id` (docs/destinations.md).
 */
const built = existsSync(join(DIST, "main.js")) && existsSync(join(DIST, "simulator", "main.js"));
const TASKS = 30;

const children: Child[] = [];
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startRelay(env: Record<string, string>): Promise<{ child: Child; url: string }> {
  const relay = await startRelayProcess(env);
  children.push(relay.child);
  return relay;
}

describe.skipIf(!built)("a relay killed while publishing to NATS JetStream", () => {
  it("SIGKILL mid-publishing, restart on the same database: every task's task.succeeded is in the stream with its webhook-id", async () => {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-queue-crash-"));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const nats: ProcessBroker = await startNats();
    cleanups.push(() => nats.close());
    const nc: NatsConnection = await connect({ servers: nats.url });
    cleanups.push(() => nc.close());
    await (await jetstreamManager(nc)).streams.add({ name: "EVENTS", subjects: ["genrelay.>"] });

    const { simulator, relayEnv: env, apiKey, secret } = await sqliteSetup(dir, "queue-crash");
    children.push(simulator);

    // Every message the stream stores, verified as a consumer would: task id → the webhook-ids it came with.
    const wh = new Webhook(secret);
    const delivered = new Map<string, Set<string>>();
    const refused: string[] = [];
    const listeners: Array<() => void> = [];
    const messages = await (await jetstream(nc).consumers.get("EVENTS")).consume();
    cleanups.push(async () => void (await messages.close()));
    void (async () => {
      for await (const msg of messages) {
        const headers: Record<string, string> = {};
        for (const [name, values] of msg.headers ?? []) headers[name.toLowerCase()] = values[0]!;
        let event: { id: string; type: string; data: { id: string } };
        try {
          event = wh.verify(msg.string(), headers) as typeof event;
        } catch (err) {
          refused.push(`${headers["webhook-id"]}: ${(err as Error).message}`);
          continue;
        }
        if (headers["webhook-id"] !== event.id)
          refused.push(`${headers["webhook-id"]} carries the body of ${event.id}`);
        if (event.type === "task.succeeded") {
          const ids = delivered.get(event.data.id) ?? new Set<string>();
          ids.add(event.id);
          delivered.set(event.data.id, ids);
        }
        for (const l of listeners) l();
      }
    })();

    let relay = await startRelay(env);
    const api = async (path: string, body: unknown, key: string) => {
      const res = await fetch(`${relay.url}${path}`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${apiKey}`,
          "Content-Type": "application/json",
          "Idempotency-Key": key,
        },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      expect(res.status, text).toBe(201);
      return JSON.parse(text) as { data: { id: string } };
    };
    await api("/openapi/v1/webhooks/endpoints", { type: "nats", url: nats.url }, "endpoint");
    const tasks = new Set<string>();
    for (let i = 0; i < TASKS; i++) {
      const created = await api(
        "/openapi/v1/images/generations",
        { model: "p-image", mode: "generate", prompt: `queue crash ${i}`, count: 1 },
        `queue-crash-${i}`,
      );
      tasks.add(created.data.id);
    }

    // Killed as soon as the first message is in the stream, with others still to publish.
    await until(
      () => delivered.size >= 1,
      (fn) => listeners.push(fn),
      30_000,
      () => "the first message in the stream",
    );
    await relay.child.kill("SIGKILL");
    const atKill = delivered.size;
    expect(atKill).toBeLessThan(TASKS);

    relay = await startRelay(env);
    await until(
      () => [...tasks].every((id) => delivered.has(id)),
      (fn) => listeners.push(fn),
      60_000,
      () => `${delivered.size}/${TASKS} tasks in the stream (${atKill} at the kill)`,
    );
    expect(refused).toEqual([]);
    expect([...delivered.keys()].sort()).toEqual([...tasks].sort());
    // One webhook-id per task's event: a publish retried after the crash carries the same id.
    for (const ids of delivered.values()) expect(ids.size).toBe(1);
  }, 120_000);
});

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateQueueCommand, DeleteMessageCommand, ReceiveMessageCommand } from "@aws-sdk/client-sqs";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import amqp from "amqplib";
import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { sqsClientOf, sqsEndpointBody, sharedRabbit, startNats, startSqs } from "../helpers/brokers.js";
import { type Child, DIST, sqliteSetup, startRelayProcess, startSqliteSimulator, until } from "./process.js";

/**
 * The built relay as a process publishing to a queue endpoint (a real RabbitMQ, NATS JetStream or
 * SQS-compatible server): SIGKILLed while it is publishing tasks' `task.succeeded`, then restarted
 * on the same database. Every task's message reaches the broker at least once, with its
 * `webhook-id` (docs/destinations.md).
 */
const built = existsSync(join(DIST, "main.js")) && existsSync(join(DIST, "simulator", "main.js"));
const TASKS = 30;

const children: Child[] = [];
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A message as a consumer gets it: the body and the headers (or SQS attributes), names lower-case. */
type OnMessage = (body: string, headers: Record<string, string>) => void;

/** Each kind's broker on loopback, the endpoint the relay publishes to, and a consumer of what it stores. */
const KINDS: Record<
  "amqp" | "nats" | "sqs",
  () => Promise<{ endpoint: Record<string, unknown>; consume: (on: OnMessage) => Promise<void> }>
> = {
  amqp: async () => {
    const rabbit = await sharedRabbit();
    cleanups.push(() => rabbit.close());
    const conn = await amqp.connect(rabbit.url);
    cleanups.push(() => conn.close());
    const ch = await conn.createChannel();
    await ch.assertExchange("genrelay", "topic", { durable: true });
    await ch.assertQueue("crash", { durable: true });
    await ch.bindQueue("crash", "genrelay", "task.#");
    return {
      endpoint: { type: "amqp", url: rabbit.url, exchange: "genrelay" },
      consume: async (on) => {
        await ch.consume("crash", (m) => m && on(m.content.toString("utf8"), m.properties.headers as never), {
          noAck: true,
        });
      },
    };
  },
  nats: async () => {
    const nats = await startNats();
    cleanups.push(() => nats.close());
    const nc = await connect({ servers: nats.url });
    cleanups.push(() => nc.close());
    await (await jetstreamManager(nc)).streams.add({ name: "EVENTS", subjects: ["genrelay.>"] });
    return {
      endpoint: { type: "nats", url: nats.url },
      consume: async (on) => {
        const messages = await (await jetstream(nc).consumers.get("EVENTS")).consume();
        cleanups.push(async () => void (await messages.close()));
        void (async () => {
          for await (const msg of messages) {
            const headers: Record<string, string> = {};
            for (const [name, values] of msg.headers ?? []) headers[name.toLowerCase()] = values[0]!;
            on(msg.string(), headers);
          }
        })();
      },
    };
  },
  sqs: async () => {
    const sqs = await startSqs();
    cleanups.push(() => sqs.close());
    const client = sqsClientOf(sqs);
    const queueUrl = (await client.send(new CreateQueueCommand({ QueueName: "crash" }))).QueueUrl!;
    let polling = true;
    cleanups.push(async () => {
      polling = false;
      client.destroy();
    });
    return {
      endpoint: sqsEndpointBody(sqs, queueUrl),
      consume: async (on) => {
        void (async () => {
          while (polling) {
            const got = await client
              .send(
                new ReceiveMessageCommand({
                  QueueUrl: queueUrl,
                  MessageAttributeNames: ["All"],
                  MaxNumberOfMessages: 10,
                  WaitTimeSeconds: 1,
                }),
              )
              .catch(() => ({ Messages: [] }));
            for (const m of got.Messages ?? []) {
              const headers: Record<string, string> = {};
              for (const [name, v] of Object.entries(m.MessageAttributes ?? {})) headers[name] = v.StringValue!;
              on(m.Body!, headers);
              await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle! }));
            }
          }
        })();
      },
    };
  },
};

async function startRelay(env: Record<string, string>): Promise<{ child: Child; url: string }> {
  const relay = await startRelayProcess(env);
  children.push(relay.child);
  return relay;
}

describe.skipIf(!built)("a relay killed while publishing to a queue", () => {
  // One simulator for the file: each kind has its own broker, database, client and relays.
  let sim: Awaited<ReturnType<typeof startSqliteSimulator>>;
  beforeAll(async () => {
    sim = await startSqliteSimulator();
  });
  afterAll(async () => {
    await sim?.simulator.kill("SIGKILL");
  });

  it.each(["amqp", "nats", "sqs"] as const)(
    "%s: SIGKILL mid-publishing, restart on the same database: every task's task.succeeded is at the broker with its webhook-id",
    async (kind) => {
      const dir = mkdtempSync(join(tmpdir(), "genrelay-queue-crash-"));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      const broker = await KINDS[kind]();

      const { relayEnv: env, apiKey, secret } = await sqliteSetup(dir, "queue-crash", sim);

      // Every message the stream stores, verified as a consumer would: task id → the webhook-ids it came with.
      const wh = new Webhook(secret);
      const delivered = new Map<string, Set<string>>();
      const refused: string[] = [];
      const listeners: Array<() => void> = [];
      await broker.consume((text, headers) => {
        let event: { id: string; type: string; data: { id: string } };
        try {
          event = wh.verify(text, headers) as typeof event;
        } catch (err) {
          refused.push(`${headers["webhook-id"]}: ${(err as Error).message}`);
          return;
        }
        if (headers["webhook-id"] !== event.id)
          refused.push(`${headers["webhook-id"]} carries the body of ${event.id}`);
        if (event.type === "task.succeeded") {
          const ids = delivered.get(event.data.id) ?? new Set<string>();
          ids.add(event.id);
          delivered.set(event.data.id, ids);
        }
        for (const l of listeners) l();
      });

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
      await api("/openapi/v1/webhooks/endpoints", broker.endpoint, "endpoint");
      const tasks = new Set<string>();
      for (let i = 0; i < TASKS; i++) {
        const created = await api(
          "/openapi/v1/images/generations",
          { model: "p-image", mode: "generate", prompt: `queue crash ${i}`, count: 1 },
          `queue-crash-${i}`,
        );
        tasks.add(created.data.id);
      }

      // Killed as soon as the first message is at the broker, with others still to publish.
      await until(
        () => delivered.size >= 1,
        (fn) => listeners.push(fn),
        30_000,
        () => "the first message at the broker",
      );
      await relay.child.kill("SIGKILL");
      const atKill = delivered.size;
      expect(atKill).toBeLessThan(TASKS);

      relay = await startRelay(env);
      await until(
        () => [...tasks].every((id) => delivered.has(id)),
        (fn) => listeners.push(fn),
        60_000,
        () => `${delivered.size}/${TASKS} tasks at the broker (${atKill} at the kill)`,
      );
      expect(refused).toEqual([]);
      expect([...delivered.keys()].sort()).toEqual([...tasks].sort());
      // One webhook-id per task's event: a publish retried after the crash carries the same id.
      for (const ids of delivered.values()) expect(ids.size).toBe(1);
    },
    120_000,
  );
});

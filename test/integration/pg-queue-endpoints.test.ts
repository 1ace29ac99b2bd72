import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { CreateQueueCommand, ReceiveMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import amqp from "amqplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "../../src/services/clients.js";
import {
  type ProcessBroker,
  type SqsBroker,
  sqsClientOf,
  sqsEndpointBody,
  startNats,
  sharedRabbit,
  startSqs,
} from "../helpers/brokers.js";
import { startInstances } from "../helpers/pg-relays.js";
import { type Received, verifyAt } from "../helpers/receiver.js";
import { imageBody } from "../helpers/relay.js";

/**
 * Queue endpoints on PostgreSQL (docs/destinations.md, "Delivered means confirmed"): an AMQP, a
 * NATS and an SQS endpoint made through one instance, a task's event delivered to all three by the
 * other, each message verified with standardwebhooks. SQLite's side: queue-endpoints.test.ts.
 */
let rabbit: ProcessBroker;
let nats: ProcessBroker;
let sqs: SqsBroker;
let sqsAdmin: SQSClient;
let queueUrl: string;

beforeAll(async () => {
  [rabbit, nats, sqs] = await Promise.all([sharedRabbit(), startNats(), startSqs()]);
  sqsAdmin = sqsClientOf(sqs);
  queueUrl = (await sqsAdmin.send(new CreateQueueCommand({ QueueName: "pg-app" }))).QueueUrl!;
  const admin = await amqp.connect(rabbit.url);
  const ch = await admin.createChannel();
  await ch.assertExchange("genrelay", "topic", { durable: true });
  await ch.assertQueue("pg-app", { durable: true });
  await ch.bindQueue("pg-app", "genrelay", "task.#");
  await admin.close();
  const nc = await connect({ servers: nats.url });
  await (await jetstreamManager(nc)).streams.add({ name: "PG", subjects: ["genrelay.>"] });
  await nc.close();
}, 90_000);
afterAll(async () => {
  sqsAdmin?.destroy();
  await Promise.all([rabbit?.close(), nats?.close(), sqs?.close()]);
});

const verify = (secret: string, body: string, headers: Record<string, string>) =>
  verifyAt(secret, { body, headers } as unknown as Received, Number(headers["webhook-timestamp"]) * 1000) as {
    id: string;
    type: string;
    data: { id: string };
  };

describe("queue endpoints on PostgreSQL", () => {
  it("an endpoint made through one instance is published to by another, verified by the consumer", async () => {
    const { clock, instances, stop } = await startInstances(2, { WEBHOOK_TIMEOUT_MS: "5000" });
    try {
      const [a, b] = instances as [(typeof instances)[0], (typeof instances)[0]];
      const { apiKey, webhookSecret } = await createClient({ store: a.store, clock }, { name: "pg-queue" });
      const post = async (path: string, json: unknown, key?: string) => {
        const res = await a.relay.app.request(`http://relay.test${path}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${apiKey}`,
            "content-type": "application/json",
            ...(key ? { "idempotency-key": key } : {}),
          },
          body: JSON.stringify(json),
        });
        expect(res.status, await res.clone().text()).toBe(201);
        return ((await res.json()) as { data: { id: string } }).data.id;
      };
      await post("/openapi/v1/webhooks/endpoints", { type: "amqp", url: rabbit.url, exchange: "genrelay" });
      await post("/openapi/v1/webhooks/endpoints", { type: "nats", url: nats.url });
      await post("/openapi/v1/webhooks/endpoints", sqsEndpointBody(sqs, queueUrl));
      const id = await post("/openapi/v1/images/generations", imageBody(), "pg-queue-1");
      await a.store.tasks.transition(
        (await a.store.tasks.find(id))!,
        { status: "failed", phase: "done", completedAt: clock.now() },
        { now: clock.now(), token: null, firstAttemptDelayMs: 0 },
      );
      for (let n = 0; n < 3; n++) {
        await b.relay.dispatcher.runOnce();
        clock.advance(60_000);
      }

      const conn = await amqp.connect(rabbit.url);
      const ch = await conn.createChannel();
      const fromRabbit = await ch.get("pg-app", { noAck: true });
      await conn.close();
      const nc = await connect({ servers: nats.url });
      const fromNats = await (await jetstreamManager(nc)).streams.getMessage("PG", {
        last_by_subj: "genrelay.task.failed",
      });
      await nc.close();
      expect(fromRabbit).not.toBe(false);
      expect(fromNats).not.toBeNull();
      const natsHeaders: Record<string, string> = {};
      for (const [name, values] of fromNats!.header) natsHeaders[name.toLowerCase()] = values[0]!;
      const viaRabbit = verify(
        webhookSecret,
        (fromRabbit as amqp.GetMessage).content.toString("utf8"),
        (fromRabbit as amqp.GetMessage).properties.headers as Record<string, string>,
      );
      const viaNats = verify(webhookSecret, fromNats!.string(), natsHeaders);
      expect(viaRabbit).toMatchObject({ type: "task.failed", data: { id } });
      expect(viaNats.id).toBe(viaRabbit.id);
      const [fromSqs] =
        (await sqsAdmin.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MessageAttributeNames: ["All"] })))
          .Messages ?? [];
      expect(fromSqs).toBeDefined();
      const sqsHeaders: Record<string, string> = {};
      for (const [name, v] of Object.entries(fromSqs!.MessageAttributes ?? {})) sqsHeaders[name] = v.StringValue!;
      const viaSqs = verify(webhookSecret, fromSqs!.Body!, sqsHeaders);
      expect(viaSqs).toMatchObject({ type: "task.failed", data: { id } });
      expect(viaSqs.id).toBe(viaRabbit.id);
    } finally {
      await stop();
    }
  });
});

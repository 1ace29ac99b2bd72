import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { CreateQueueCommand, SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import amqp, { type Channel, type ChannelModel } from "amqplib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type ProcessBroker,
  type SqsBroker,
  signedMessage,
  sqsClientOf,
  sqsEndpointBody,
  startNats,
  sharedRabbit,
  startSqs,
} from "../helpers/brokers.js";
import { ROOT } from "../helpers/doc-blocks.js";
import { type LiveRelay, startLiveRelay } from "../helpers/live-relay.js";

/**
 * The queue consumers under examples/ (shown in docs/destinations.md, kept equal to these files by
 * test/unit/doc-blocks.test.ts) run as written against real brokers on loopback: each verifies the
 * `task.succeeded` a real relay published for a real task, handles it once however often it comes,
 * and refuses a tampered message and one signed for another client.
 * examples/sqs-lambda-handler.mjs runs under a stand-in for Lambda's SQS trigger (LAMBDA_SQS_TRIGGER).
 */

const EXAMPLES = join(ROOT, "examples");

let live: LiveRelay;
let rabbit: ProcessBroker;
let nats: ProcessBroker;
let sqs: SqsBroker;
let amqpAdmin: ChannelModel;
let amqpChannel: Channel;
let nc: NatsConnection;
let sqsAdmin: SQSClient;
let queueUrl: string;
const running: ConsumerProcess[] = [];

beforeAll(async () => {
  [live, rabbit, nats, sqs] = await Promise.all([startLiveRelay(), sharedRabbit(), startNats(), startSqs()]);
  amqpAdmin = await amqp.connect(rabbit.url);
  amqpChannel = await amqpAdmin.createChannel();
  await amqpChannel.assertExchange("genrelay", "topic", { durable: true });
  await amqpChannel.assertQueue("genrelay", { durable: true });
  await amqpChannel.bindQueue("genrelay", "genrelay", "task.#");
  nc = await connect({ servers: nats.url });
  await (await jetstreamManager(nc)).streams.add({ name: "EVENTS", subjects: ["genrelay.>"] });
  sqsAdmin = sqsClientOf(sqs);
  queueUrl = (await sqsAdmin.send(new CreateQueueCommand({ QueueName: "genrelay-events" }))).QueueUrl!;
}, 120_000);
afterAll(async () => {
  await Promise.all(running.splice(0).map((c) => c.stop()));
  await amqpAdmin?.close().catch(() => {});
  await nc?.close();
  sqsAdmin?.destroy();
  await live?.close();
  await Promise.all([rabbit?.close(), nats?.close(), sqs?.close()]);
});

interface Message {
  body: string;
  headers: Record<string, string>;
}

/** Each example: how it is started, the endpoint the relay publishes to, and how a test publishes beside the relay. */
const KINDS = [
  {
    file: "consume-amqp.mjs",
    start: (secret: string) =>
      startConsumer(process.execPath, [join(EXAMPLES, "consume-amqp.mjs")], {
        GENRELAY_WEBHOOK_SECRET: secret,
        AMQP_URL: rabbit.url,
        AMQP_QUEUE: "genrelay",
      }),
    endpoint: () => ({ type: "amqp", url: rabbit.url, exchange: "genrelay" }),
    publish: async (m: Message) => {
      amqpChannel.publish("genrelay", "task.succeeded", Buffer.from(m.body), { headers: m.headers, persistent: true });
    },
  },
  {
    file: "consume-nats.mjs",
    start: (secret: string) =>
      startConsumer(process.execPath, [join(EXAMPLES, "consume-nats.mjs")], {
        GENRELAY_WEBHOOK_SECRET: secret,
        NATS_URL: nats.url,
        NATS_STREAM: "EVENTS",
      }),
    endpoint: () => ({ type: "nats", url: nats.url }),
    // No Nats-Msg-Id: the stream stores a replay, so the consumer's own de-duplication is what is tested.
    publish: async (m: Message) => {
      const h = natsHeaders();
      for (const [name, value] of Object.entries(m.headers)) h.set(name, value);
      await jetstream(nc).publish("genrelay.task.succeeded", m.body, { headers: h });
    },
  },
  {
    file: "sqs-lambda-handler.mjs",
    start: (secret: string) =>
      startConsumer(process.execPath, ["--input-type=module", "-e", LAMBDA_SQS_TRIGGER], {
        GENRELAY_WEBHOOK_SECRET: secret,
        HANDLER: pathToFileURL(join(EXAMPLES, "sqs-lambda-handler.mjs")).href,
        SQS_ENDPOINT: sqs.url,
        QUEUE_URL: queueUrl,
        // The AWS SDK warns on stderr that it will want Node 22 in 2027; Lambda runs a current Node.
        NODE_NO_WARNINGS: "1",
      }),
    endpoint: () => sqsEndpointBody(sqs, queueUrl),
    publish: async (m: Message) => {
      await sqsAdmin.send(
        new SendMessageCommand({
          QueueUrl: queueUrl,
          MessageBody: m.body,
          MessageAttributes: Object.fromEntries(
            Object.entries(m.headers).map(([name, value]) => [name, { DataType: "String", StringValue: value }]),
          ),
        }),
      );
    },
  },
];

/**
 * What Lambda's SQS trigger does for the handler, in a few lines: long-polls the queue, hands each
 * batch over as Lambda's event (records with `messageAttributes.<name>.stringValue`), deletes the
 * records it did not report in `batchItemFailures`; a reported one stays hidden for the test's length.
 */
const LAMBDA_SQS_TRIGGER = `
import { DeleteMessageCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
const { handler } = await import(process.env.HANDLER);
const sqs = new SQSClient({ region: "us-east-1", endpoint: process.env.SQS_ENDPOINT,
  credentials: { accessKeyId: "test", secretAccessKey: "test" } });
let stopped = false;
process.once("SIGTERM", () => { stopped = true; });
console.log("consuming " + process.env.QUEUE_URL);
while (!stopped) {
  const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl: process.env.QUEUE_URL,
    MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 600, MessageAttributeNames: ["All"] }));
  if (Messages.length === 0) continue;
  const Records = Messages.map((m) => ({ messageId: m.MessageId, receiptHandle: m.ReceiptHandle, body: m.Body,
    eventSource: "aws:sqs", attributes: {}, messageAttributes: Object.fromEntries(Object.entries(m.MessageAttributes ?? {})
      .map(([name, a]) => [name, { stringValue: a.StringValue, stringListValues: [], binaryListValues: [], dataType: a.DataType }])) }));
  const { batchItemFailures } = await handler({ Records });
  const failed = new Set(batchItemFailures.map((f) => f.itemIdentifier));
  for (const m of Messages)
    if (!failed.has(m.MessageId)) await sqs.send(new DeleteMessageCommand({ QueueUrl: process.env.QUEUE_URL, ReceiptHandle: m.ReceiptHandle }));
}
sqs.destroy();
`;

async function api(apiKey: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${live.url}${path}`, {
    method,
    headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json", "Idempotency-Key": randomUUID() },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  expect(res.status, `${method} ${path}: ${text}`).toBeLessThan(300);
  return JSON.parse(text);
}

describe("examples/ queue consumers, against real brokers", () => {
  it("each verifies a relay-published task.succeeded, handles it once, and refuses a tampered or foreign message", async () => {
    const client = live.client("examples-queues");
    const other = live.client("examples-queues-other");
    for (const kind of KINDS) await api(client.apiKey, "POST", "/openapi/v1/webhooks/endpoints", kind.endpoint());
    const consumers = await Promise.all(KINDS.map((k) => k.start(client.secret)));

    const created = await api(client.apiKey, "POST", "/openapi/v1/images/generations", {
      model: "p-image",
      mode: "generate",
      prompt: "a lighthouse at dawn",
      count: 1,
      metadata: { order_id: "1234" },
    });
    const taskId = created.data.id as string;
    const succeeded = await Promise.all(
      consumers.map((c) => c.line((e) => e.type === "task.succeeded" && e.data?.id === taskId)),
    );
    for (const event of succeeded) {
      expect(event).toMatchObject({
        id: succeeded[0].id,
        data: { id: taskId, status: "succeeded", metadata: { order_id: "1234" } },
      });
    }
    for (const c of consumers) expect(c.errors).toEqual([]);

    // The relay's own message, as the stream stored it: replayed as is, tampered, and beside one signed for another client.
    const stored = await (await jetstreamManager(nc)).streams.getMessage("EVENTS", {
      last_by_subj: "genrelay.task.succeeded",
    });
    const genuine: Message = { body: stored!.string(), headers: {} };
    for (const [name, values] of stored!.header) genuine.headers[name.toLowerCase()] = values[0]!;
    expect(genuine.headers["webhook-id"]).toBe(succeeded[0].id);
    const tampered = { ...genuine, body: genuine.body.replace('"status":"succeeded"', '"status":"failed"') };
    expect(tampered.body).not.toBe(genuine.body);
    const foreign = signedMessage(other.secret);

    for (const [i, kind] of KINDS.entries()) {
      const consumer = consumers[i]!;
      await kind.publish(tampered);
      await kind.publish({ body: foreign.body, headers: foreign.headers });
      await kind.publish(genuine);
      // A later genuine message, once handled, proves the three before it were seen and refused or skipped.
      const marker = signedMessage(client.secret);
      await kind.publish({ body: marker.body, headers: marker.headers });
      await consumer.line((e) => e.id === marker.id);
      expect(
        consumer.handled.filter((e) => e.id === genuine.headers["webhook-id"]),
        kind.file,
      ).toHaveLength(1);
      expect(
        consumer.handled.map((e) => e.id),
        kind.file,
      ).not.toContain(foreign.id);
      expect(consumer.errors, kind.file).toEqual([
        "rejected: No matching signature found",
        "rejected: No matching signature found",
      ]);
    }
  }, 60_000);
});

// --- the example's side -------------------------------------------------------------------

interface ConsumerProcess {
  /** The events it printed (one JSON line each). */
  handled: any[];
  /** Its stderr lines. */
  errors: string[];
  /** Resolves with the first printed event that matches (already printed, or the next); rejects if the process exits first. */
  line(match: (event: any) => boolean): Promise<any>;
  stop(): Promise<void>;
}

/** Starts a consumer in the repository's directory (its node_modules), resolving once it says it is consuming. */
async function startConsumer(command: string, args: string[], env: Record<string, string>): Promise<ConsumerProcess> {
  const child: ChildProcess = spawn(command, args, {
    cwd: ROOT,
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const name = args.at(-1)!.slice(0, 60);
  const handled: any[] = [];
  const errors: string[] = [];
  const waiters: Array<{ match: (e: any) => boolean; resolve: (e: any) => void; reject: (err: Error) => void }> = [];
  let consuming: () => void = () => {};
  const ready = new Promise<void>((resolve) => (consuming = resolve));
  let exit: Error | null = null;
  const exited = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      exit = new Error(`${name} exited (${code ?? signal}):\n${errors.join("\n")}`);
      for (const w of waiters.splice(0)) w.reject(exit);
      resolve();
    }),
  );
  createInterface({ input: child.stderr! }).on("line", (l) => errors.push(l));
  createInterface({ input: child.stdout! }).on("line", (l) => {
    if (l.startsWith("consuming ")) return consuming();
    const event = JSON.parse(l) as unknown;
    handled.push(event);
    for (const w of waiters.filter((x) => x.match(event))) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(event);
    }
  });
  const consumer: ConsumerProcess = {
    handled,
    errors,
    line(match) {
      const seen = handled.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      if (exit) return Promise.reject(exit);
      return new Promise((resolve, reject) => waiters.push({ match, resolve, reject }));
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
  running.push(consumer);
  await Promise.race([ready, exited.then(() => Promise.reject(exit!))]);
  return consumer;
}

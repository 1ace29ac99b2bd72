// The queue baseline (forked, driven over IPC): the broker's own client publishing a webhook body
// `total` times, `concurrency` publishes in flight, each waiting for the broker's confirmation as the
// relay does (a RabbitMQ publisher confirm under `mandatory`, a JetStream PubAck, an SQS SendMessage
// answer), with headers of the relay's names and sizes. No signing, no database.
import { SendMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { jetstream } from "@nats-io/jetstream";
import { connect as natsConnect, headers as natsHeaders } from "@nats-io/transport-node";
import amqp from "amqplib";
import { Agent } from "node:http";
import { serveIpc } from "./lib/proc.mjs";

let client = null;

const publishers = {
  async amqp({ url, exchange, routingKey }) {
    const model = await amqp.connect(url);
    const channel = await model.createConfirmChannel();
    return {
      send: (body, headers, id) =>
        new Promise((resolve, reject) => {
          channel.publish(
            exchange,
            routingKey,
            Buffer.from(body, "utf8"),
            { persistent: true, mandatory: true, contentType: "application/json", messageId: id, headers },
            (err) => (err ? reject(err) : resolve()),
          );
        }),
      close: () => model.close(),
    };
  },
  async nats({ url, subject }) {
    const nc = await natsConnect({ servers: url });
    const js = jetstream(nc);
    const encoder = new TextEncoder();
    return {
      send: async (body, headers, id) => {
        const h = natsHeaders();
        for (const [name, value] of Object.entries(headers)) h.set(name, value);
        await js.publish(subject, encoder.encode(body), { msgID: id, headers: h });
      },
      close: () => nc.close(),
    };
  },
  async sqs({ endpoint, queueUrl, region }) {
    const sqs = new SQSClient({
      region,
      endpoint,
      credentials: { accessKeyId: "test", secretAccessKey: "test" },
      maxAttempts: 1,
      requestHandler: { httpAgent: new Agent({ keepAlive: true, maxSockets: 16 }) },
    });
    return {
      send: async (body, headers) => {
        const attributes = {};
        for (const [name, value] of Object.entries(headers))
          attributes[name] = { DataType: "String", StringValue: value };
        const out = await sqs.send(
          new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, MessageAttributes: attributes }),
        );
        if (!out.MD5OfMessageBody) throw new Error("SQS answered no MD5OfMessageBody");
      },
      close: () => sqs.destroy(),
    };
  },
};

serveIpc({
  async connect({ kind, target }) {
    client = await publishers[kind](target);
    return null;
  },
  async publish({ body, headers, total, concurrency, idPrefix }) {
    let next = 0;
    let failed = 0;
    const started = performance.now();
    const worker = async () => {
      while (next < total) {
        const id = `${idPrefix}${String(next++).padStart(9, "0")}`;
        try {
          await client.send(body, { ...headers, "webhook-id": id }, id);
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const seconds = (performance.now() - started) / 1000;
    return { ok: total - failed, failed, seconds, rate: (total - failed) / seconds };
  },
  async close() {
    await client?.close();
    client = null;
    return null;
  },
});

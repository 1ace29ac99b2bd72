// The broker clients' own publish, as the raw baseline (bench/raw-queue.mjs) and the durable
// queue prototype (bench/proto/queue-delivery.mjs) both use it: `send(body, headers, id)` resolves
// once the broker confirmed (a RabbitMQ publisher confirm under `mandatory`, rejected when the
// message came back unroutable; a JetStream PubAck with Nats-Msg-Id = id; an SQS SendMessage answer).
import { SendMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { jetstream } from "@nats-io/jetstream";
import { connect as natsConnect, headers as natsHeaders } from "@nats-io/transport-node";
import amqp from "amqplib";
import { Agent } from "node:http";

export const publishers = {
  async amqp({ url, exchange, routingKey }) {
    const model = await amqp.connect(url, { noDelay: true });
    const channel = await model.createConfirmChannel();
    // A returned (unroutable) message still gets its confirm, after the return.
    const returned = new Set();
    channel.on("return", (msg) => returned.add(msg.properties.messageId));
    return {
      send: (body, headers, id) =>
        new Promise((resolve, reject) => {
          channel.publish(
            exchange,
            routingKey,
            Buffer.from(body, "utf8"),
            { persistent: true, mandatory: true, contentType: "application/json", messageId: id, headers },
            (err) => {
              if (returned.delete(id)) reject(new Error("no queue bound"));
              else if (err) reject(err);
              else resolve();
            },
          );
        }),
      close: () => model.close(),
    };
  },
  async nats({ url, subject }) {
    // As the relay connects (src/destinations/nats.ts): no stack captured per request, which the
    // client does by default (about 30 µs of a publish), so the baselines pay what the relay pays.
    const nc = await natsConnect({ servers: url, noAsyncTraces: true });
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

// The floor of a durable queue relay (docs/performance.md "Queue destinations"): the delivery
// prototype (bench/proto/delivery.mjs: batched claim under a lease, Standard Webhooks HMAC, each
// attempt and the event's new state recorded in batched transactions, WAL + synchronous=FULL) with
// a broker publish in place of the POST, the message as the relay publishes it:
//   amqp  amqplib confirm channel, `persistent` + `mandatory`, the webhook headers as AMQP headers,
//         messageId = webhook-id; delivered when the broker confirms and did not return it.
//   nats  @nats-io/jetstream publish awaiting the PubAck, Nats-Msg-Id = webhook-id, the webhook
//         headers as NATS headers.
// One connection for the process; PER_HOST (8) publishes in flight, as the relay's per-host limit.
//
//   DATABASE_PATH=... QUEUE_KIND=amqp|nats QUEUE_TARGET='{"url":…,"exchange":…,"routingKey":…}'
//   (nats: '{"url":…,"subject":…}') node bench/proto/queue-delivery.mjs
// prints "proto-queue ready" once connected, then drains what is due.
import { fileURLToPath } from "node:url";
import { publishers } from "../lib/queue-publishers.mjs";
import { runDeliveryProcess } from "./delivery.mjs";

const CONTENT_TYPE = "application/json";

/** A transport for sqliteDelivery over the broker's own publish: every row to the one target (one in-flight key). */
async function queueTransport(kind, target) {
  const publisher = await publishers[kind](target);
  return {
    route: () => ({ key: kind }),
    send: ({ event }, headers) =>
      publisher.send(event.payload, { ...headers, "content-type": CONTENT_TYPE }, headers["webhook-id"]).then(
        () => ({ ok: true, code: null, error: null }),
        (err) => ({ ok: false, code: null, error: String(err?.message ?? err) }),
      ),
    close: () => publisher.close(),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const kind = process.env.QUEUE_KIND;
  if (!["amqp", "nats"].includes(kind)) throw new Error(`QUEUE_KIND must be amqp or nats, not ${kind}`);
  runDeliveryProcess("proto-queue", await queueTransport(kind, JSON.parse(process.env.QUEUE_TARGET)));
}

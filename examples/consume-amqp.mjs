// A genrelay consumer of a RabbitMQ queue (an `amqp` endpoint, docs/destinations.md): verifies each
// message's Standard Webhooks signature with the `standardwebhooks` package, handles each event
// once, and acknowledges it. A message that fails verification is rejected, not requeued (it goes
// to the queue's dead-letter exchange, if it has one).
//
//   npm install amqplib standardwebhooks
//   GENRELAY_WEBHOOK_SECRET=whsec_… AMQP_URL=amqp://user:pass@host:5672 AMQP_QUEUE=genrelay node consume-amqp.mjs
import amqp from "amqplib";
import { Webhook } from "standardwebhooks";

const wh = new Webhook(process.env.GENRELAY_WEBHOOK_SECRET); // the client's "whsec_…" secret
const seen = new Set(); // ids of the events handled; keep them in your database in production

/** Your work goes here (store the output, notify someone…); this one prints the event as one JSON line. */
function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

const queue = process.env.AMQP_QUEUE ?? "genrelay"; // a queue bound to the endpoint's exchange
const connection = await amqp.connect(process.env.AMQP_URL ?? "amqp://guest:guest@127.0.0.1:5672");
const channel = await connection.createChannel();
await channel.prefetch(16);
await channel.consume(queue, (msg) => {
  if (msg === null) return; // the queue was deleted
  const body = msg.content.toString("utf8"); // verify the raw body, before any JSON parsing
  let event;
  try {
    // The message headers are the HTTP webhook's: webhook-id, webhook-timestamp, webhook-signature.
    // Throws on a bad signature, or a timestamp more than 5 minutes off (read a backlog promptly).
    event = wh.verify(body, msg.properties.headers ?? {});
  } catch (err) {
    console.error(`rejected: ${err.message}`);
    return channel.nack(msg, false, false);
  }
  if (!seen.has(event.id)) {
    seen.add(event.id); // delivery is at least once: a retry brings the same id again
    handle(event);
  }
  channel.ack(msg);
});
console.log(`consuming ${queue}`);

process.once("SIGTERM", () => connection.close());

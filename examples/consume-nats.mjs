// A genrelay consumer of a NATS JetStream stream (a `nats` endpoint, docs/destinations.md): verifies
// each message's Standard Webhooks signature with the `standardwebhooks` package, handles each
// event once, and acknowledges it. A message that fails verification is terminated (never redelivered).
//
//   npm install @nats-io/transport-node @nats-io/jetstream standardwebhooks
//   GENRELAY_WEBHOOK_SECRET=whsec_… NATS_URL=nats://host:4222 NATS_STREAM=EVENTS node consume-nats.mjs
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Webhook } from "standardwebhooks";

const wh = new Webhook(process.env.GENRELAY_WEBHOOK_SECRET); // the client's "whsec_…" secret
const seen = new Set(); // ids of the events handled; keep them in your database in production

/** Your work goes here (store the output, notify someone…); this one prints the event as one JSON line. */
function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

const stream = process.env.NATS_STREAM ?? "EVENTS"; // a stream capturing the endpoint's subject (genrelay.>)
const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
// A durable consumer: it resumes where it left off after a restart (adding it again is a no-op).
const durable = process.env.NATS_CONSUMER ?? "genrelay-app";
await (await jetstreamManager(nc)).consumers.add(stream, { durable_name: durable, ack_policy: AckPolicy.Explicit });
const messages = await (await jetstream(nc).consumers.get(stream, durable)).consume();
console.log(`consuming ${stream}`);
process.once("SIGTERM", () => nc.drain());

for await (const msg of messages) {
  const headers = {}; // webhook-id, webhook-timestamp, webhook-signature, with lower-case names
  for (const [name, values] of msg.headers ?? []) headers[name.toLowerCase()] = values[0];
  let event;
  try {
    // Throws on a bad signature, or a timestamp more than 5 minutes off (read a backlog promptly).
    event = wh.verify(msg.string(), headers); // the raw body, before any JSON parsing
  } catch (err) {
    console.error(`rejected: ${err.message}`);
    msg.term();
    continue;
  }
  if (!seen.has(event.id)) {
    seen.add(event.id); // delivery is at least once: a retry brings the same id again
    handle(event);
  }
  msg.ack();
}

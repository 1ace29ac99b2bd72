// A genrelay webhook receiver in plain Node (node:http): verifies each message's Standard Webhooks
// signature (HMAC, `v1`) with the `standardwebhooks` package, and handles each event once.
//
//   npm install standardwebhooks
//   GENRELAY_WEBHOOK_SECRET=whsec_… node receive-hmac.mjs    # PORT (default 3000), HOST (default 127.0.0.1)
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const wh = new Webhook(process.env.GENRELAY_WEBHOOK_SECRET); // the client's "whsec_…" secret
const seen = new Set(); // ids of the events handled; keep them in your database in production

/** Your work goes here (store the output, notify someone…); this one prints the event as one JSON line. */
function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

const server = createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/hooks/genrelay") return res.writeHead(404).end();
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks).toString("utf8"); // verify the raw body, before any JSON parsing
  let event;
  try {
    event = wh.verify(body, req.headers); // throws on a bad signature, or a timestamp more than 5 minutes off
  } catch (err) {
    console.error(`rejected: ${err.message}`);
    return res.writeHead(400).end(); // genrelay retries a non-2xx answer
  }
  if (!seen.has(event.id)) {
    seen.add(event.id); // delivery is at least once: a retry brings the same id again
    handle(event);
  }
  res.writeHead(204).end();
});

server.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`listening on http://${address}:${port}/hooks/genrelay`);
});

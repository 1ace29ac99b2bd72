// A genrelay webhook receiver for Ed25519 signatures (`v1a`, a client with `signature: "ed25519"`),
// with node:crypto and no other package: the client's public key alone verifies, no shared secret.
//
//   GENRELAY_PUBLIC_KEY=whpk_… node receive-ed25519.mjs    # PORT (default 3000), HOST (default 127.0.0.1)
//
// GENRELAY_PUBLIC_KEY is `public_key` of GET /openapi/v1/webhooks/settings: "whpk_" + base64 of the
// raw 32-byte key. After a key rotation the previous key signs beside the new one for 24 hours.
import { createPublicKey, verify } from "node:crypto";
import { createServer } from "node:http";

const raw = Buffer.from(process.env.GENRELAY_PUBLIC_KEY.slice("whpk_".length), "base64"); // 32 bytes
const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
const seen = new Set(); // ids of the events handled; keep them in your database in production

/** The event, or null when no `v1a` signature verifies or the timestamp is more than 5 minutes off. */
function verified(headers, body) {
  const id = headers["webhook-id"],
    ts = headers["webhook-timestamp"],
    signatures = headers["webhook-signature"] ?? "";
  if (!id || !/^\d+$/.test(ts ?? "") || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return null;
  const content = Buffer.concat([Buffer.from(`${id}.${ts}.`), body]); // "{id}.{timestamp}.{raw body}"
  const ok = signatures.split(" ").some((entry) => {
    const [version, signature] = entry.split(",");
    return version === "v1a" && signature !== undefined && verify(null, content, key, Buffer.from(signature, "base64"));
  });
  return ok ? JSON.parse(body.toString("utf8")) : null;
}

/** Your work goes here (store the output, notify someone…); this one prints the event as one JSON line. */
function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

const server = createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/hooks/genrelay") return res.writeHead(404).end();
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const event = verified(req.headers, Buffer.concat(chunks)); // the raw body, before any JSON parsing
  if (event === null) {
    console.error(`rejected: ${req.headers["webhook-id"] ?? "(no webhook-id)"}`);
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

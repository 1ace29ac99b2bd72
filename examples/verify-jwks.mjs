// A genrelay webhook receiver for Ed25519 signatures (`v1a`) whose keys come from the relay's
// published JWKS, with node:crypto and no other package: no secret and no key to copy by hand.
//
//   GENRELAY_JWKS_URL=https://relay.example.com/openapi/v1/webhooks/jwks/cli_… node verify-jwks.mjs
//   # PORT (default 3000), HOST (default 127.0.0.1)
//
// The JWKS lists the client's current key and, during a rotation's 24-hour overlap, the previous
// one. It is fetched at start, kept for 5 minutes (its Cache-Control), and fetched again when no
// key verifies a signature (a rotation happened), at most once a minute.
import { createPublicKey, verify } from "node:crypto";
import { createServer } from "node:http";

let keys = []; // node:crypto public keys of the JWKS
let fetchedAt = 0;

async function refreshKeys() {
  fetchedAt = Date.now();
  const res = await fetch(process.env.GENRELAY_JWKS_URL);
  if (!res.ok) {
    // The relay's error says why (an hmac client has no keys, and how to switch): print it, not a stack.
    const reason = await res.json().then(
      (body) => body.error?.message,
      () => undefined,
    );
    throw new Error(`the JWKS answered ${res.status}${reason ? `: ${reason}` : ""}`);
  }
  const jwks = await res.json();
  keys = jwks.keys
    .filter((jwk) => jwk.kty === "OKP" && jwk.crv === "Ed25519")
    .map((jwk) => createPublicKey({ key: jwk, format: "jwk" }));
}

/** Whether one `v1a` signature of the header verifies `content` with one of the keys. */
function signedBy(signatures, content) {
  return signatures.split(" ").some((entry) => {
    const [version, signature] = entry.split(",");
    if (version !== "v1a" || signature === undefined) return false;
    return keys.some((key) => verify(null, content, key, Buffer.from(signature, "base64")));
  });
}

/** The event, or null when no `v1a` signature verifies or the timestamp is more than 5 minutes off. */
async function verified(headers, body) {
  const id = headers["webhook-id"],
    ts = headers["webhook-timestamp"],
    signatures = headers["webhook-signature"] ?? "";
  if (!id || !/^\d+$/.test(ts ?? "") || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return null;
  const content = Buffer.concat([Buffer.from(`${id}.${ts}.`), body]); // "{id}.{timestamp}.{raw body}"
  if (Date.now() - fetchedAt > 300_000) await refreshKeys().catch(() => {});
  if (signedBy(signatures, content)) return JSON.parse(body.toString("utf8"));
  if (Date.now() - fetchedAt < 60_000) return null;
  await refreshKeys().catch(() => {}); // a new key after a rotation
  return signedBy(signatures, content) ? JSON.parse(body.toString("utf8")) : null;
}

const seen = new Set(); // ids of the events handled; keep them in your database in production

/** Your work goes here (store the output, notify someone…); this one prints the event as one JSON line. */
function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

const server = createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/hooks/genrelay") return res.writeHead(404).end();
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const event = await verified(req.headers, Buffer.concat(chunks)); // the raw body, before any JSON parsing
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

await refreshKeys().catch((err) => {
  console.error(`cannot start: ${err.message}`);
  process.exit(1);
});
server.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`listening on http://${address}:${port}/hooks/genrelay`);
});

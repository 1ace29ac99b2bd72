/**
 * `npm run receiver`: a webhook receiver for trying the relay on one machine. Listens on 127.0.0.1,
 * verifies each request's Standard Webhooks signature with WEBHOOK_SECRET (the client's `whsec_…`
 * secret), prints every verified webhook as one JSON line on stdout and answers 204; anything
 * unverified is refused with 400 and one line on stderr. Point a task's callback_url at it with
 * WEBHOOK_ALLOW_PRIVATE_NETWORKS=true on the relay (loopback callbacks are refused otherwise).
 *
 *   WEBHOOK_SECRET=whsec_… RECEIVER_PORT=9000 npm run receiver
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";

const MAX_BODY_BYTES = 2 * 1024 * 1024;

function fail(line: string): never {
  process.stderr.write(`receiver: ${line}\n`);
  process.exit(2);
}

function verifierFrom(secret: string | undefined): Webhook {
  if (!secret)
    fail("set WEBHOOK_SECRET to the client's webhook secret (whsec_…, printed by `npm run cli -- clients create`)");
  // The library takes any string (it base64-decodes what it is given), so `hello` would "verify" nothing
  // the relay signed: refuse what is not a whsec_ secret of at least 128 bits, saying where to find one.
  const base64 = secret.slice("whsec_".length);
  if (
    !secret.startsWith("whsec_") ||
    !/^[A-Za-z0-9+/]+={0,2}$/.test(base64) ||
    Buffer.from(base64, "base64").length < 16
  )
    return fail(
      "WEBHOOK_SECRET is not a webhook secret (expected whsec_ followed by base64 of at least 16 bytes, as `npm run cli -- clients create` prints it)",
    );
  return new Webhook(secret);
}

function portFrom(value: string | undefined): number {
  if (value === undefined || value === "") return 9000;
  if (!/^\d+$/.test(value) || Number(value) > 65535)
    fail(`RECEIVER_PORT must be a port number from 0 to 65535 (got "${value}")`);
  return Number(value);
}

/** The body as text, or null when it is larger than a webhook can be. */
function readBody(req: IncomingMessage): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= MAX_BODY_BYTES) chunks.push(c);
    });
    req.on("end", () => resolve(size > MAX_BODY_BYTES ? null : Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

const verifier = verifierFrom(process.env.WEBHOOK_SECRET);
const port = portFrom(process.env.RECEIVER_PORT);

const server = createServer((req, res) => {
  void readBody(req).then(
    (body) => {
      if (req.method !== "POST" || body === null) {
        process.stderr.write(
          `receiver: refused ${req.method} ${req.url}: ${body === null ? "body too large" : "not a POST"}\n`,
        );
        res.writeHead(req.method !== "POST" ? 405 : 413).end();
        return;
      }
      const headers = {
        "webhook-id": String(req.headers["webhook-id"] ?? ""),
        "webhook-timestamp": String(req.headers["webhook-timestamp"] ?? ""),
        "webhook-signature": String(req.headers["webhook-signature"] ?? ""),
      };
      let event: unknown;
      try {
        event = verifier.verify(body, headers);
      } catch (err) {
        process.stderr.write(
          `receiver: REJECTED webhook ${headers["webhook-id"] || "(no webhook-id)"}: ${(err as Error).message}\n`,
        );
        res.writeHead(400).end();
        return;
      }
      // One line per webhook, the verified payload as sent: easy to read, grep or pipe into jq.
      process.stdout.write(`${JSON.stringify({ webhook_id: headers["webhook-id"], ...(event as object) })}\n`);
      res.writeHead(204).end();
    },
    () => res.destroy(),
  );
});

server.on("error", (err) => fail(`cannot listen on 127.0.0.1:${port}: ${err.message}`));
server.listen(port, "127.0.0.1", () => {
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`;
  process.stderr.write(`receiver: listening on ${url} (any path), verifying signatures with WEBHOOK_SECRET\n`);
});
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}

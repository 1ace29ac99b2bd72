import { createServer, type Socket } from "node:net";
import { TLSSocket } from "node:tls";
import { afterEach, describe, expect, it } from "vitest";
import { NatsDestination } from "../../src/destinations/nats.js";
import { generateWebhookSecret } from "../../src/webhooks/sign.js";
import { signedMessage } from "../helpers/brokers.js";

/**
 * NATS over TLS connects to the address the guard vetted, never to the name again (a second,
 * unchecked resolution is a DNS-rebinding gap), and keeps the name for SNI and the certificate
 * check (docs/destinations.md). The broker is a stand-in on 127.0.0.2 that asks for TLS and records
 * the ClientHello's server name; the injected resolver says `localhost` is 127.0.0.2, while the
 * system's own lookup of `localhost` would answer 127.0.0.1, where nothing listens on that port.
 */
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

async function tlsRequiringBroker() {
  const seen: Array<{ local: string; servername: string | null }> = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.write(
      `INFO ${JSON.stringify({ server_id: "stand-in", version: "2.10.0", proto: 1, max_payload: 1048576, tls_required: true })}\r\n`,
    );
    const tls = new TLSSocket(socket, {
      isServer: true,
      SNICallback: (servername, cb) => {
        seen.push({ local: socket.localAddress ?? "", servername });
        cb(new Error("stand-in broker: no certificate"));
      },
    });
    tls.on("error", () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.2", resolve));
  const port = (server.address() as { port: number }).port;
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port, seen };
}

describe("NatsDestination over TLS", () => {
  it("dials the vetted address and sends the host name as SNI", async () => {
    const broker = await tlsRequiringBroker();
    const asked: string[] = [];
    const dest = new NatsDestination({
      allowPrivateNetworks: true,
      connectTimeoutMs: 2_000,
      resolve: async (hostname) => {
        asked.push(hostname);
        return [{ address: "127.0.0.2", family: 4 }];
      },
    });
    closers.push(() => dest.close());
    const result = await dest.publish(
      { url: `tls://localhost:${broker.port}`, subject: null },
      signedMessage(generateWebhookSecret()),
      2_000,
    );
    expect(result.ok).toBe(false);
    expect(asked).toEqual(["localhost"]);
    expect(broker.seen).toEqual([{ local: "127.0.0.2", servername: "localhost" }]);
  });
});

import { type JetStreamClient, jetstream } from "@nats-io/jetstream";
import {
  connect,
  credsAuthenticator,
  headers,
  type NatsConnection,
  type NodeConnectionOptions,
} from "@nats-io/transport-node";
import { parseHostAsIp } from "../net/address-guard.js";
import type { SendResult } from "../webhooks/sender.js";
import { BrokerClient, brokerHostOf, type QueueClientOptions } from "./broker-client.js";
import type { QueueMessage } from "./queue-message.js";

/**
 * NATS JetStream destinations (docs/destinations.md, "Delivered means confirmed"): a message counts as delivered only
 * on the stream's `PubAck`. `Nats-Msg-Id` is the `webhook-id`, so a retry the stream already
 * stored (its ack was lost) is acknowledged as a duplicate and stored once. A subject no stream
 * listens on has no responder: a failed attempt naming the subject.
 */
export interface NatsTarget {
  /** `nats://host:port` or `tls://host:port` (user and password may be in the URL). */
  url: string;
  /** Null: `genrelay.<event type>`. */
  subject: string | null;
  /** Optional credentials: a token, or a `.creds` file's text (JWT and NKey seed). */
  token?: string | null;
  creds?: string | null;
}

export const natsSubject = (target: Pick<NatsTarget, "subject">, type: string): string =>
  target.subject ?? `genrelay.${type}`;

/** One encoder for every publish: it holds no state between calls. */
const utf8 = new TextEncoder();

interface NatsClient {
  nc: NatsConnection;
  js: JetStreamClient;
}

export class NatsDestination extends BrokerClient<NatsClient> {
  constructor(opts: QueueClientOptions) {
    super(opts, (c) => c.nc.close());
  }

  async publish(target: NatsTarget, message: QueueMessage, timeoutMs: number): Promise<SendResult> {
    const { url, broker } = this.address(target.url, (u) => `NATS at ${brokerHostOf(u, "4222")}`);
    const subject = natsSubject(target, message.type);
    const key = `${message.tenant}|${target.url}|${target.token ?? ""}|${target.creds ?? ""}`;
    return this.publishWith({
      key,
      broker,
      timeoutMs,
      open: (signal) => this.open(key, url, target, signal),
      send: async (client) => {
        const ack = await this.send(client, subject, message, timeoutMs);
        return `PubAck: stream "${ack.stream}", seq ${ack.seq}${ack.duplicate ? ", duplicate (already stored)" : ""}`;
      },
    });
  }

  private async open(key: string, url: URL, target: NatsTarget, signal: AbortSignal): Promise<NatsClient> {
    const address = await this.resolve(url.hostname);
    signal.throwIfAborted();
    const tls = url.protocol === "tls:";
    const port = url.port || "4222";
    const dialed = `${address.includes(":") ? `[${address}]` : address}:${port}`;
    // Always the vetted address: dialing the name would resolve it again, unchecked (DNS rebinding).
    // Over TLS the name goes in SNI and is what the certificate is checked against (as HTTPS
    // deliveries and amqps:// do); an IP literal is checked as itself.
    const servername = parseHostAsIp(url.hostname) === null ? url.hostname : undefined;
    // node:tls options, which the transport passes through to tls.connect (its type names only some).
    const tlsOptions: NonNullable<NodeConnectionOptions["tls"]> & { servername?: string } = servername
      ? { servername }
      : {};
    const nc = await connect({
      servers: tls ? `tls://${dialed}` : dialed,
      timeout: this.connectTimeoutMs,
      reconnect: false,
      ignoreClusterUpdates: true,
      // No stack captured per request: the client otherwise makes a RequestError and a TimeoutError
      // for every publish to point a failure at its caller (about 30 µs a publish, measured), and an
      // attempt's failure keeps only its message.
      noAsyncTraces: true,
      noRandomize: true,
      ...(tls ? { tls: tlsOptions } : {}),
      ...(url.username ? { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) } : {}),
      ...(target.token ? { token: target.token } : {}),
      ...(target.creds ? { authenticator: credsAuthenticator(utf8.encode(target.creds)) } : {}),
    });
    if (signal.aborted) {
      await nc.close().catch(() => {});
      signal.throwIfAborted();
    }
    const client = { nc, js: jetstream(nc) };
    void nc.closed().then(() => this.connections.forget(key, client));
    return client;
  }

  private async send(client: NatsClient, subject: string, message: QueueMessage, timeoutMs: number) {
    const h = headers();
    // A fresh set of distinct names: appended, without set's search for the name first.
    for (const name in message.headers) h.append(name, message.headers[name]!);
    try {
      return await client.js.publish(subject, utf8.encode(message.body), {
        msgID: message.id,
        headers: h,
        timeout: timeoutMs,
      });
    } catch (err) {
      const text = err instanceof Error ? err.message : String(err);
      // The client reports a publish nobody answered as "jetstream is not enabled": the server has
      // no stream capturing the subject (or no JetStream at all).
      if (/no responders|503|jetstream is not enabled/i.test(text))
        throw new Error(
          `no JetStream stream for subject "${subject}" (no responders): create a stream that captures it`,
        );
      throw err;
    }
  }
}

import { Writable } from "node:stream";
import amqp, { type ChannelModel, type ConfirmChannel, type Message } from "amqplib";
import type { SendResult } from "../webhooks/sender.js";
import { BrokerClient, brokerHostOf, type QueueClientOptions } from "./broker-client.js";
import type { QueueMessage } from "./queue-message.js";

/**
 * RabbitMQ (AMQP 0-9-1) destinations (docs/destinations.md, "Delivered means confirmed"): each message is published
 * `persistent` and `mandatory` on a confirm channel, and counts as delivered only when the broker
 * confirms it. A message no queue is bound to is returned before its confirm: a failed attempt
 * naming "no queue bound". An exchange that does not exist closes the channel (404): a failed
 * attempt naming the exchange; exchanges may be declared after the endpoint is, so this is
 * found at publish time, not refused at creation.
 */
export interface AmqpTarget {
  /** `amqp://` or `amqps://user:pass@host:port/vhost`. */
  url: string;
  exchange: string;
  /** Null: the event type. */
  routingKey: string | null;
}

interface AmqpConnection {
  model: ChannelModel;
  channel: ConfirmChannel;
  /** Returned (unroutable) messages by message id, until their confirm settles the publish. */
  returned: Map<string, string>;
  /** Why the channel closed (a 404 for an unknown exchange), for the publishes it took down. */
  closedBecause: string | null;
}

export class AmqpDestination extends BrokerClient<AmqpConnection> {
  constructor(opts: QueueClientOptions) {
    super(opts, (c) => c.model.close());
  }

  publish(target: AmqpTarget, message: QueueMessage, timeoutMs: number): Promise<SendResult> {
    const { url, broker } = this.address(
      target.url,
      (u) => `RabbitMQ at ${brokerHostOf(u, u.protocol === "amqps:" ? "5671" : "5672")}`,
    );
    const key = `${message.tenant}|${target.url}`;
    return this.publishWith({
      key,
      broker,
      timeoutMs,
      open: (signal) => this.open(key, url, signal),
      send: (conn) => this.send(conn, target, message),
    });
  }

  private async open(key: string, url: URL, signal: AbortSignal): Promise<AmqpConnection> {
    const address = await this.resolve(url.hostname);
    signal.throwIfAborted();
    const tls = url.protocol === "amqps:";
    const vhost = decodeURIComponent(url.pathname.slice(1)) || "/";
    const model = await amqp.connect(
      {
        protocol: tls ? "amqps" : "amqp",
        hostname: address,
        port: Number(url.port || (tls ? 5671 : 5672)),
        username: decodeURIComponent(url.username) || "guest",
        password: decodeURIComponent(url.password) || "guest",
        vhost,
        heartbeat: 30,
      },
      // noDelay: a publish is three small frames awaited by its confirm; under Nagle's algorithm
      // they wait for the ACK of the previous write whenever publishes do not come back to back
      // (the dispatcher's are spread by its database work), delaying every confirm.
      // The certificate names the broker's host, not the vetted address the socket dials.
      tls
        ? { servername: url.hostname, timeout: this.connectTimeoutMs, noDelay: true }
        : { timeout: this.connectTimeoutMs, noDelay: true },
    );
    if (signal.aborted) {
      await model.close().catch(() => {});
      signal.throwIfAborted();
    }
    const channel = await model.createConfirmChannel();
    const conn: AmqpConnection = {
      model,
      channel,
      returned: new Map(),
      closedBecause: null,
    };
    writeTogether(model);
    channel.on("return", (msg: Message) => {
      const id = msg.properties.messageId as string | undefined;
      if (id)
        conn.returned.set(
          id,
          `${(msg.fields as unknown as { replyCode: number }).replyCode} ${(msg.fields as unknown as { replyText: string }).replyText}`,
        );
    });
    channel.on("error", (err: Error) => {
      conn.closedBecause = err.message;
    });
    channel.on("close", () => this.connections.forget(key, conn));
    model.on("error", () => {});
    model.on("close", () => this.connections.forget(key, conn));
    return conn;
  }

  private send(conn: AmqpConnection, target: AmqpTarget, message: QueueMessage): Promise<string> {
    const routingKey = target.routingKey ?? message.type;
    return new Promise<string>((resolve, reject) => {
      const settle = (err: unknown) => {
        const returned = conn.returned.get(message.id);
        conn.returned.delete(message.id);
        if (returned !== undefined) {
          reject(
            new Error(
              `no queue bound: RabbitMQ returned the message (${returned}) from exchange "${target.exchange}" with routing key "${routingKey}"`,
            ),
          );
        } else if (err) {
          const why = conn.closedBecause ?? (err instanceof Error ? err.message : String(err));
          reject(new Error(/NOT_FOUND.*exchange/i.test(why) ? `unknown exchange "${target.exchange}": ${why}` : why));
        } else {
          resolve(`confirmed by RabbitMQ: exchange "${target.exchange}", routing key "${routingKey}"`);
        }
      };
      try {
        conn.channel.publish(
          target.exchange,
          routingKey,
          Buffer.from(message.body, "utf8"),
          {
            persistent: true,
            mandatory: true,
            contentType: message.headers["content-type"] ?? "application/json",
            messageId: message.id,
            timestamp: Math.floor(Number(message.headers["webhook-timestamp"] ?? Date.now() / 1000)),
            type: message.type,
            headers: message.headers,
          },
          settle,
        );
      } catch (err) {
        reject(err);
      }
    });
  }
}

/**
 * Each flush of amqplib's writes goes to the socket as one write. amqplib queues a publish's frames on
 * its channel and writes them from a setImmediate (its `Mux`), each publish a write of its own: one
 * system call a message, which on loopback also pays the broker side's TCP work. The publishes
 * queued by then (those of one turn of the event loop) now leave corked together, as one `writev`,
 * in that same flush: nothing waits for a later turn, unlike Nagle's algorithm (off: `noDelay`).
 * Left as it is if amqplib's internals are not as expected (`connection.stream`, `muxer`).
 */
function writeTogether(model: ChannelModel): void {
  const connection = model.connection as unknown as { stream?: unknown; muxer?: { _readIncoming?: unknown } };
  const socket = connection.stream;
  const mux = connection.muxer;
  if (!(socket instanceof Writable) || typeof mux?._readIncoming !== "function") return;
  const flush = mux._readIncoming as () => void;
  mux._readIncoming = () => {
    socket.cork();
    try {
      flush.call(mux);
    } finally {
      socket.uncork();
    }
  };
}

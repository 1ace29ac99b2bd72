import { Socket } from "node:net";
import amqp, { type ChannelModel } from "amqplib";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AmqpDestination } from "../../src/destinations/amqp.js";
import { generateWebhookSecret } from "../../src/webhooks/sign.js";
import { blackHole, type SharedBroker, sharedRabbit, signedMessage } from "../helpers/brokers.js";

/** The RabbitMQ client against a real broker (docs/destinations.md, "Delivered means confirmed"). */
describe("AmqpDestination", () => {
  let rabbit: SharedBroker;
  let admin: ChannelModel;
  const secret = generateWebhookSecret();

  beforeAll(async () => {
    rabbit = await sharedRabbit();
    admin = await amqp.connect(rabbit.url);
    const ch = await admin.createChannel();
    await ch.assertExchange("events", "topic", { durable: true });
    await ch.assertQueue("succeeded", { durable: true });
    await ch.bindQueue("succeeded", "events", "task.succeeded");
    await ch.close();
  }, 90_000);
  afterAll(async () => {
    await admin?.close().catch(() => {});
    await rabbit?.close();
  });

  const client = () => new AmqpDestination({ allowPrivateNetworks: true });

  it("publishes the webhook confirmed, and a consumer verifies it with standardwebhooks", async () => {
    const dest = client();
    const signed = signedMessage(secret);
    const result = await dest.publish({ url: rabbit.url, exchange: "events", routingKey: null }, signed, 5_000);
    expect(result).toMatchObject({ ok: true, error: null });
    expect(result.responseBody).toBe('confirmed by RabbitMQ: exchange "events", routing key "task.succeeded"');
    const ch = await admin.createChannel();
    const got = await ch.get("succeeded", { noAck: true });
    await ch.close();
    expect(got).not.toBe(false);
    if (!got) return;
    expect(got.content.toString("utf8")).toBe(signed.body);
    const headers = got.properties.headers as Record<string, string>;
    expect(Object.keys(headers).sort()).toEqual([
      "content-type",
      "webhook-id",
      "webhook-signature",
      "webhook-timestamp",
    ]);
    expect(got.properties.messageId).toBe(signed.id);
    expect(got.properties.deliveryMode).toBe(2);
    expect(new Webhook(secret).verify(got.content.toString("utf8"), headers)).toEqual(JSON.parse(signed.body));
    // One connection, reused by the next publish.
    expect(dest.openConnections).toBe(1);
    expect((await dest.publish({ url: rabbit.url, exchange: "events", routingKey: null }, signed, 5_000)).ok).toBe(
      true,
    );
    expect(dest.openConnections).toBe(1);
    await dest.close();
  });

  it("publishes made in one turn leave in one write, each confirmed and queued", async () => {
    const dest = client();
    const target = { url: rabbit.url, exchange: "events", routingKey: "task.turn" };
    const ch = await admin.createChannel();
    await ch.assertQueue("turn", { durable: true });
    await ch.bindQueue("turn", "events", "task.turn");
    // The connection first, so the turn's writes are its publishes only.
    expect((await dest.publish(target, signedMessage(secret), 5_000)).ok).toBe(true);
    await ch.purgeQueue("turn");
    const writev = vi.spyOn(Socket.prototype, "_writev");
    const write = vi.spyOn(Socket.prototype, "_write");
    try {
      const messages = Array.from({ length: 5 }, () => signedMessage(secret));
      const results = await Promise.all(messages.map((m) => dest.publish(target, m, 5_000)));
      expect(results.map((r) => r.ok)).toEqual([true, true, true, true, true]);
      // The client's socket's writes (not the broker door's, nor the admin connection's): amqplib
      // alone writes each publish's frames with a write of its own, five system calls.
      const port = Number(new URL(rabbit.url).port);
      const adminSocket = (admin.connection as unknown as { stream: Socket }).stream;
      const clients = (spy: { mock: { contexts: unknown[]; calls: unknown[][] } }) =>
        spy.mock.calls.filter((_, i) => {
          const socket = spy.mock.contexts[i] as Socket;
          return socket !== adminSocket && socket.remotePort === port;
        });
      expect(clients(write)).toHaveLength(0);
      expect(clients(writev)).toHaveLength(1);
      expect(clients(writev)[0]![0]).toHaveLength(5);
      writev.mockRestore();
      write.mockRestore();
      const ids: string[] = [];
      for (let got = await ch.get("turn", { noAck: true }); got; got = await ch.get("turn", { noAck: true }))
        ids.push(got.properties.messageId as string);
      expect(ids.sort()).toEqual(messages.map((m) => m.id).sort());
    } finally {
      writev.mockRestore();
      write.mockRestore();
      await ch.close();
      await dest.close();
    }
  });

  it("an unroutable message is a failed attempt naming 'no queue bound'", async () => {
    const dest = client();
    const result = await dest.publish(
      { url: rabbit.url, exchange: "events", routingKey: "nobody.listens" },
      signedMessage(secret),
      5_000,
    );
    expect(result).toMatchObject({ ok: false, blocked: false });
    expect(result.error).toBe(
      'no queue bound: RabbitMQ returned the message (312 NO_ROUTE) from exchange "events" with routing key "nobody.listens"',
    );
    await dest.close();
  });

  it("an unknown exchange is a failed attempt naming it, and the next publish works", async () => {
    const dest = client();
    const result = await dest.publish(
      { url: rabbit.url, exchange: "nope", routingKey: null },
      signedMessage(secret),
      5_000,
    );
    expect(result.ok).toBe(false);
    expect(result.error).toBe(
      `unknown exchange "nope": Channel closed by server: 404 (NOT-FOUND) with message "NOT_FOUND - no exchange 'nope' in vhost '${rabbit.vhost}'"`,
    );
    const again = await dest.publish(
      { url: rabbit.url, exchange: "events", routingKey: null },
      signedMessage(secret),
      5_000,
    );
    expect(again.ok).toBe(true);
    await dest.close();
  });

  it("the address guard refuses a loopback broker unless private networks are allowed", async () => {
    const dest = new AmqpDestination({ allowPrivateNetworks: false });
    const result = await dest.publish(
      { url: rabbit.url, exchange: "events", routingKey: null },
      signedMessage(secret),
      5_000,
    );
    expect(result).toMatchObject({ ok: false, blocked: true, error: "broker address 127.0.0.1 is loopback" });
    await dest.close();
  });

  it("a broker that stalls mid-publish is a deadline failure; the next attempt opens a fresh connection", async () => {
    const dest = client();
    const target = { url: rabbit.url, exchange: "events", routingKey: null };
    expect((await dest.publish(target, signedMessage(secret), 5_000)).ok).toBe(true);
    await rabbit.freeze();
    try {
      const stalled = await dest.publish(target, signedMessage(secret), 300);
      expect(stalled).toMatchObject({
        ok: false,
        error: `publishing to RabbitMQ at 127.0.0.1:${rabbit.port} took longer than its deadline of 300 ms`,
      });
      expect(dest.openConnections).toBe(0);
    } finally {
      rabbit.thaw();
    }
    expect((await dest.publish(target, signedMessage(secret), 5_000)).ok).toBe(true);
    await dest.close();
  });

  it("a broker that never answers is a deadline failure that lets go of the connection", async () => {
    const hole = await blackHole();
    const dest = new AmqpDestination({ allowPrivateNetworks: true, connectTimeoutMs: 300 });
    const result = await dest.publish(
      { url: `amqp://guest:guest@127.0.0.1:${hole.port}`, exchange: "events", routingKey: null },
      signedMessage(secret),
      5_000,
    );
    expect(result.ok).toBe(false);
    expect(result.error).toBe(
      `connecting to RabbitMQ at 127.0.0.1:${hole.port} took longer than its deadline of 300 ms`,
    );
    expect(dest.openConnections).toBe(0);
    await hole.close();
    await dest.close();
  });
});

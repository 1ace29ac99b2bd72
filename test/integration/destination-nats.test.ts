import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NatsDestination } from "../../src/destinations/nats.js";
import { generateWebhookSecret } from "../../src/webhooks/sign.js";
import { blackHole, type ProcessBroker, signedMessage, startNats } from "../helpers/brokers.js";

/** The JetStream client against a real nats-server -js (docs/destinations.md, "Delivered means confirmed"). */
describe("NatsDestination", () => {
  let nats: ProcessBroker;
  let admin: NatsConnection;
  let jsm: JetStreamManager;
  const secret = generateWebhookSecret();

  beforeAll(async () => {
    nats = await startNats();
    admin = await connect({ servers: nats.url });
    jsm = await jetstreamManager(admin);
    await jsm.streams.add({ name: "GENRELAY", subjects: ["genrelay.>"] });
  });
  afterAll(async () => {
    await admin?.close().catch(() => {});
    await nats?.close();
  });

  const client = () => new NatsDestination({ allowPrivateNetworks: true });

  it("publishes the webhook with a PubAck, Nats-Msg-Id = webhook-id, and a consumer verifies it", async () => {
    const dest = client();
    const signed = signedMessage(secret);
    const result = await dest.publish({ url: nats.url, subject: null }, signed, 5_000);
    expect(result).toMatchObject({ ok: true, error: null });
    expect(result.responseBody).toMatch(/^PubAck: stream "GENRELAY", seq \d+$/);
    const stored = await jsm.streams.getMessage("GENRELAY", { last_by_subj: "genrelay.task.succeeded" });
    expect(stored).not.toBeNull();
    if (!stored) return;
    expect(stored.string()).toBe(signed.body);
    const hdrs: Record<string, string> = {};
    for (const [name, values] of stored.header) hdrs[name.toLowerCase()] = values[0]!;
    expect(hdrs["nats-msg-id"]).toBe(signed.id);
    expect(new Webhook(secret).verify(stored.string(), hdrs)).toEqual(JSON.parse(signed.body));

    // The same webhook-id again (a retry whose ack was lost) is stored once.
    const again = await dest.publish({ url: nats.url, subject: null }, signed, 5_000);
    expect(again.responseBody).toMatch(/, duplicate \(already stored\)$/);
    expect(dest.openConnections).toBe(1);
    await dest.close();
  });

  it("a subject no stream captures is a failed attempt naming it", async () => {
    const dest = client();
    const result = await dest.publish({ url: nats.url, subject: "elsewhere.events" }, signedMessage(secret), 5_000);
    expect(result).toMatchObject({
      ok: false,
      error: 'no JetStream stream for subject "elsewhere.events" (no responders): create a stream that captures it',
    });
    await dest.close();
  });

  it("the address guard refuses a loopback broker unless private networks are allowed", async () => {
    const dest = new NatsDestination({ allowPrivateNetworks: false });
    const result = await dest.publish({ url: nats.url, subject: null }, signedMessage(secret), 5_000);
    expect(result).toMatchObject({ ok: false, blocked: true, error: "broker address 127.0.0.1 is loopback" });
    await dest.close();
  });

  it("a stalled server is a deadline failure; the next attempt opens a fresh connection", async () => {
    const dest = client();
    expect((await dest.publish({ url: nats.url, subject: null }, signedMessage(secret), 5_000)).ok).toBe(true);
    await nats.freeze();
    try {
      const stalled = await dest.publish({ url: nats.url, subject: null }, signedMessage(secret), 300);
      expect(stalled).toMatchObject({
        ok: false,
        error: `publishing to NATS at 127.0.0.1:${nats.port} took longer than its deadline of 300 ms`,
      });
      expect(dest.openConnections).toBe(0);
    } finally {
      nats.thaw();
    }
    expect((await dest.publish({ url: nats.url, subject: null }, signedMessage(secret), 5_000)).ok).toBe(true);
    await dest.close();
  });

  it("a server that never answers the handshake is a connect deadline failure", async () => {
    const hole = await blackHole();
    const dest = new NatsDestination({ allowPrivateNetworks: true, connectTimeoutMs: 300 });
    const result = await dest.publish(
      { url: `nats://127.0.0.1:${hole.port}`, subject: null },
      signedMessage(secret),
      5_000,
    );
    expect(result.ok).toBe(false);
    expect(result.error).toBe(`connecting to NATS at 127.0.0.1:${hole.port} took longer than its deadline of 300 ms`);
    expect(dest.openConnections).toBe(0);
    await hole.close();
    await dest.close();
  });
});

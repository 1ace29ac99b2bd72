import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { httpDestination, WEBHOOK_KIND } from "../../src/destinations/http.js";
import { queueKinds } from "../../src/destinations/queues.js";
import {
  Destinations,
  type DestinationMessage,
  type DeliveryOutcome,
  type SendDeadline,
} from "../../src/destinations/index.js";
import { sealHeaders } from "../../src/webhooks/callback-headers.js";
import type { EventRow } from "../../src/store/rows.js";
import { outgoingHeaders } from "../../src/webhooks/outgoing.js";
import { sendResult, type SendRequest } from "../../src/webhooks/sender.js";
import { deliveryMessage } from "../../src/workers/delivery/message.js";
import { signingClient } from "../helpers/signing-client.js";

const KEY = randomBytes(32);
// Now: the verifier refuses timestamps more than five minutes off.
const AT = Date.now();

const client = (defaults: Record<string, string> | null) => signingClient(defaults, KEY, AT);

function event(fields: Partial<EventRow> = {}): EventRow {
  return {
    id: "evt_row",
    webhookId: null,
    clientId: "cli_1",
    taskId: "task_1",
    type: "task.succeeded",
    payload: '{"type":"task.succeeded","data":{"id":"task_1"}}',
    callbackUrl: "https://receiver.example/hook",
    destinationHost: "receiver.example:443",
    callbackHeaders: sealHeaders({ "X-Task": "t" }, KEY),
    ...fields,
  } as EventRow;
}

/** A sender that answers 200 and keeps what it was asked to send. */
function recordingSender() {
  const requests: SendRequest[] = [];
  return {
    requests,
    sender: {
      send: async (req: SendRequest) => {
        requests.push(req);
        return sendResult({ ok: true, statusCode: 200, latencyMs: 1 });
      },
    },
  };
}

describe("deliveryMessage: the signed message every kind carries", () => {
  it("carries the event's id, timestamp, body, signature, type, task and extra headers", () => {
    const { row } = client({ "X-Team": "a" });
    const m = deliveryMessage(event({ webhookId: "evt_shared" }), row, AT, KEY);
    expect({ ...m, signature: m.signature.replace(/^v1,[A-Za-z0-9+/=]+$/, "v1,<hmac>") }).toEqual({
      target: { kind: "webhook", address: "https://receiver.example/hook", tenant: "cli_1" },
      eventId: "evt_shared",
      timestamp: Math.floor(AT / 1000),
      body: '{"type":"task.succeeded","data":{"id":"task_1"}}',
      signature: "v1,<hmac>",
      contentType: "application/json",
      type: "task.succeeded",
      taskId: "task_1",
      headers: { "x-team": "a", "x-task": "t" },
    });
  });
});

describe("the webhook kind (destinations/http.ts)", () => {
  const deadline: SendDeadline = { timeoutMs: 1_234 };

  it("sends exactly the headers outgoingHeaders makes, to the callback URL, on the tenant's connections", async () => {
    const { row, secret } = client({ "X-Team": "a" });
    const { sender, requests } = recordingSender();
    const registry = new Destinations().register(
      WEBHOOK_KIND,
      httpDestination(sender, { allowPrivateNetworks: false }),
    );
    const e = event();
    const outcome = await registry.send(deliveryMessage(e, row, AT, KEY), deadline);
    expect(outcome).toEqual(sendResult({ ok: true, statusCode: 200, latencyMs: 1 }));
    expect(requests).toEqual([
      {
        url: "https://receiver.example/hook",
        headers: outgoingHeaders({
          client: row,
          id: "evt_row",
          at: AT,
          body: e.payload,
          encryptionKey: KEY,
          callbackHeaders: e.callbackHeaders,
        }),
        body: e.payload,
        timeoutMs: 1_234,
        tenant: "cli_1",
      },
    ]);
    const headers = requests[0]!.headers;
    expect(new Webhook(secret).verify(e.payload, headers)).toEqual(JSON.parse(e.payload));
  });

  it("adds a message's trace context outside the signed content: the signature still verifies", async () => {
    const { row, secret } = client(null);
    const { sender, requests } = recordingSender();
    const registry = new Destinations().register(
      WEBHOOK_KIND,
      httpDestination(sender, { allowPrivateNetworks: false }),
    );
    const e = event({ callbackHeaders: JSON.stringify({ traceparent: "forged" }) });
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    await registry.send({ ...deliveryMessage(e, row, AT, KEY), traceparent, tracestate: "k=v" }, deadline);
    const headers = requests[0]!.headers;
    expect(headers.traceparent).toBe(traceparent);
    expect(headers.tracestate).toBe("k=v");
    expect(new Webhook(secret).verify(e.payload, headers)).toEqual(JSON.parse(e.payload));
  });

  it("refuses a private or non-https address before the port: blocked, nothing sent", async () => {
    const { row } = client(null);
    const { sender, requests } = recordingSender();
    const registry = new Destinations().register(
      WEBHOOK_KIND,
      httpDestination(sender, { allowPrivateNetworks: false }),
    );
    const outcome = await registry.send(
      deliveryMessage(event({ callbackUrl: "https://10.0.0.1/hook" }), row, AT, KEY),
      deadline,
    );
    expect(outcome).toEqual(
      sendResult({
        blocked: true,
        error:
          "blocked: 10.0.0.1 is private (RFC 1918); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
      }),
    );
    expect(requests).toEqual([]);
  });
});

describe("Destinations: the registry", () => {
  const message = (kind: string, address: string): DestinationMessage => ({
    target: { kind, address, tenant: "cli_1" },
    eventId: "evt_1",
    timestamp: 1,
    body: "{}",
    signature: "v1,x",
    contentType: "application/json",
    type: "task.succeeded",
    taskId: "task_1",
    headers: {},
  });

  it("a new kind is one registration: its sender gets the message and deadline, behind its own guard", async () => {
    const sent: Array<[DestinationMessage, SendDeadline]> = [];
    const ok: DeliveryOutcome = sendResult({ ok: true, latencyMs: 2, responseBody: "acked" });
    const registry = new Destinations().register("queue", {
      refuse: (address) => (address.startsWith("queue://") ? null : `scheme of ${address} is not queue:`),
      destination: {
        send: async (m, d) => {
          sent.push([m, d]);
          return ok;
        },
      },
    });
    expect(registry.names()).toEqual(["queue"]);
    expect(await registry.send(message("queue", "queue://q/a"), { timeoutMs: 5 })).toEqual(ok);
    expect(sent).toEqual([[message("queue", "queue://q/a"), { timeoutMs: 5 }]]);
    expect(await registry.send(message("queue", "amqp://q/a"), { timeoutMs: 5 })).toEqual(
      sendResult({ blocked: true, error: "blocked: scheme of amqp://q/a is not queue:" }),
    );
    expect(sent).toHaveLength(1);
  });

  it("an unregistered kind is a failed attempt, not a throw", async () => {
    expect(await new Destinations().send(message("sqs", "https://sqs.example/q"), { timeoutMs: 5 })).toEqual(
      sendResult({ error: "no destination of kind sqs" }),
    );
  });

  it("refuses a kind registered twice", () => {
    const kind = { refuse: () => null, destination: { send: async () => sendResult({}) } };
    const registry = new Destinations().register("webhook", kind);
    expect(() => registry.register("webhook", kind)).toThrow(new Error("destination kind webhook is registered twice"));
  });
});

describe("the queue kinds' address guard", () => {
  it("refuses a private broker, an address without a host and one that does not parse, each time it is asked", async () => {
    const { kinds, close } = queueKinds({ allowPrivateNetworks: false, targets: async () => null });
    for (let i = 0; i < 2; i++) {
      expect(kinds.amqp.refuse("amqp://127.0.0.1:5672/")).toBe("127.0.0.1 is loopback");
      expect(kinds.nats.refuse("nats://10.1.2.3:4222")).toBe("10.1.2.3 is private (RFC 1918)");
      expect(kinds.sqs.refuse("sqs+https://sqs.eu-west-1.amazonaws.com/123/q")).toBeNull();
      expect(kinds.amqp.refuse("amqp://")).toBe("the broker address has no host");
      expect(kinds.amqp.refuse("not a url")).toBe("the broker address does not parse");
    }
    const open = queueKinds({ allowPrivateNetworks: true, targets: async () => null });
    expect(open.kinds.amqp.refuse("amqp://127.0.0.1:5672/")).toBeNull();
    await Promise.all([close(), open.close()]);
  });
});

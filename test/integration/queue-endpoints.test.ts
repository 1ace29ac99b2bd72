import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { CreateQueueCommand, ReceiveMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import amqp, { type ChannelModel } from "amqplib";
import { http, passthrough } from "msw";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { succeededTask } from "../helpers/flow.js";
import {
  blackHole,
  type ProcessBroker,
  type SharedBroker,
  type SqsBroker,
  sqsClientOf,
  startNats,
  sharedRabbit,
  startSqs,
} from "../helpers/brokers.js";
import { type Received, verifyAt } from "../helpers/receiver.js";
import { v1aOfRotation } from "../helpers/v1a-rotation.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite, WORKER_TEST_ENV } from "../helpers/upstream-suite.js";

/**
 * Queue endpoints end to end (docs/destinations.md): created through the API, a task's
 * `task.succeeded` published by the dispatcher to a real RabbitMQ, NATS JetStream and SQS-compatible
 * server, each message verified with standardwebhooks and the client's secret; the broker's answer
 * (or why it refused) in the attempt log. PostgreSQL's side: pg-queue-endpoints.test.ts.
 */
const suite = upstreamSuite({ ...WORKER_TEST_ENV, WEBHOOK_TIMEOUT_MS: "5000" });
const PATH = "/openapi/v1/webhooks/endpoints";
const PAST_SCHEDULE = 2 * 60 * 60_000;

let rabbit: SharedBroker;
let nats: ProcessBroker;
let sqs: SqsBroker;
let admin: ChannelModel;
let sqsAdmin: SQSClient;
let queueUrl: string;
/** The SQS queue of each named use (`outage`, `ed25519`): a use's messages stay apart from the others'. */
const sqsQueueUrls = new Map<string, string>();

/** The test's own RabbitMQ connection; a broker restart closes it (an error event, ignored here). */
async function adminConnection(): Promise<ChannelModel> {
  const conn = await amqp.connect(rabbit.url);
  conn.on("error", () => {});
  return conn;
}

beforeAll(async () => {
  [rabbit, nats, sqs] = await Promise.all([sharedRabbit(), startNats(), startSqs()]);
  suite.server.use(sqsPassthrough());
  admin = await adminConnection();
  const ch = await admin.createChannel();
  await ch.assertExchange("genrelay", "topic", { durable: true });
  await ch.assertQueue("app", { durable: true });
  await ch.bindQueue("app", "genrelay", "task.#");
  for (const use of USES) {
    await ch.assertQueue(use, { durable: true });
    await ch.bindQueue(use, "genrelay", `${use}.amqp`);
  }
  await ch.close();
  const nc = await connect({ servers: nats.url });
  await (await jetstreamManager(nc)).streams.add({ name: "EVENTS", subjects: ["genrelay.>"] });
  await nc.close();
  sqsAdmin = sqsClientOf(sqs);
  queueUrl = (await sqsAdmin.send(new CreateQueueCommand({ QueueName: "app-events" }))).QueueUrl!;
  for (const use of USES)
    sqsQueueUrls.set(use, (await sqsAdmin.send(new CreateQueueCommand({ QueueName: `${use}-events` }))).QueueUrl!);
}, 90_000);
afterAll(async () => {
  await admin?.close().catch(() => {});
  sqsAdmin?.destroy();
  await Promise.all([rabbit?.close(), nats?.close(), sqs?.close()]);
});

async function body(res: Response, expected: number): Promise<any> {
  const text = await res.text();
  expect(res.status, text).toBe(expected);
  return text ? JSON.parse(text) : null;
}

/** msw refuses unknown requests; SQS calls go to the loopback server. */
const sqsPassthrough = () => http.all(`${sqs.url}/*`, () => passthrough());

/** A relay whose SQS calls reach the loopback server. */
function setup(env: Record<string, string> = {}) {
  const { t, up } = suite.setup(env);
  suite.server.use(sqsPassthrough());
  return { t, up };
}

async function deliverAll(t: TestRelay, rounds = 3) {
  for (let round = 0; round < rounds; round++) {
    await t.relay.dispatcher.runOnce();
    t.clock.advance(PAST_SCHEDULE);
  }
}

/** standardwebhooks' verify at the moment the message was sent (the relay's clock is fake), as a consumer on arrival. */
const verifyMessage = (secret: string, text: string, headers: Record<string, string>) =>
  verifyAt(secret, { body: text, headers } as unknown as Received, Number(headers["webhook-timestamp"]) * 1000);

const attempts = async (t: TestRelay, apiKey: string, id: string) =>
  (await body(await t.request(apiKey, `/openapi/v1/tasks/${id}/deliveries`), 200)).data;

/** The outcomes of a task's attempts, oldest first. */
const attemptOutcomes = async (t: TestRelay, apiKey: string, id: string): Promise<string[]> =>
  ((await attempts(t, apiKey, id)) as Array<{ attempted_at: string; outcome: string }>)
    .sort((a, b) => a.attempted_at.localeCompare(b.attempted_at))
    .map((a) => a.outcome);

type Consumed = Array<[string, Record<string, string>]>;

/** The tests that read every message of a queue of their own, per kind. */
const USES = ["outage", "ed25519"] as const;
type Use = (typeof USES)[number];

/**
 * Each kind for one use: its endpoint (the use's own queue: an AMQP queue bound to `<use>.amqp`,
 * the NATS subject `genrelay.<use>`, the SQS queue `<use>-events`), its broker, and every message
 * a consumer finds there.
 */
const QUEUES: Record<
  "amqp" | "nats" | "sqs",
  (use: Use) => {
    endpoint: () => Record<string, unknown>;
    broker: () => { stop(): Promise<void>; start(): Promise<void> };
    restarted?: () => Promise<void>;
    read: () => Promise<Consumed>;
  }
> = {
  amqp: (use) => ({
    endpoint: () => amqpEndpoint(`${use}.amqp`),
    broker: () => rabbit,
    // The restart closed the test's own connection too.
    restarted: async () => {
      admin = await adminConnection();
    },
    read: async () => {
      const ch = await admin.createChannel();
      const out: Consumed = [];
      for (let m = await ch.get(use, { noAck: true }); m; m = await ch.get(use, { noAck: true }))
        out.push([m.content.toString("utf8"), m.properties.headers as Record<string, string>]);
      await ch.close();
      return out;
    },
  }),
  nats: (use) => ({
    endpoint: () => ({ type: "nats", url: nats.url, subject: `genrelay.${use}` }),
    broker: () => nats,
    read: async () => {
      const nc = await connect({ servers: nats.url });
      const jsm = await jetstreamManager(nc);
      const out: Consumed = [];
      const last = (await jsm.streams.info("EVENTS")).state.last_seq;
      for (let seq = 1; seq <= last; seq++) {
        const m = await jsm.streams.getMessage("EVENTS", { seq }).catch(() => null);
        if (m?.subject !== `genrelay.${use}`) continue;
        const h: Record<string, string> = {};
        for (const [name, values] of m.header) h[name.toLowerCase()] = values[0]!;
        out.push([m.string(), h]);
      }
      await nc.close();
      return out;
    },
  }),
  sqs: (use) => ({
    endpoint: () => ({ ...sqsEndpoint(), queue_url: sqsQueueUrls.get(use)! }),
    broker: () => sqs,
    read: async () => {
      const out: Consumed = [];
      for (;;) {
        const got = await sqsAdmin.send(
          new ReceiveMessageCommand({
            QueueUrl: sqsQueueUrls.get(use)!,
            MessageAttributeNames: ["All"],
            MaxNumberOfMessages: 10,
          }),
        );
        if (!got.Messages?.length) return out;
        for (const m of got.Messages) {
          const h: Record<string, string> = {};
          for (const [name, v] of Object.entries(m.MessageAttributes ?? {})) h[name] = v.StringValue!;
          out.push([m.Body!, h]);
        }
      }
    },
  }),
};

const amqpEndpoint = (routingKey?: string) => ({
  type: "amqp",
  url: rabbit.url,
  exchange: "genrelay",
  ...(routingKey ? { routing_key: routingKey } : {}),
});
/** A NATS endpoint of the client, publishing on `subject`. */
const addNatsEndpoint = async (t: TestRelay, apiKey: string, subject: string) =>
  body(await t.request(apiKey, PATH, { method: "POST", json: { type: "nats", url: nats.url, subject } }), 201);
const sqsEndpoint = () => ({
  type: "sqs",
  queue_url: queueUrl,
  region: sqs.region,
  access_key_id: sqs.accessKeyId,
  secret_access_key: "s3cr3t-never-shown",
  endpoint: sqs.url,
});

describe("queue endpoints: the API", () => {
  it("creates each kind (201) with its settings, never its credentials, sealed at rest", async () => {
    const key = randomBytes(32).toString("base64");
    const { t } = setup({ RELAY_ENCRYPTION_KEY: key });
    const { apiKey } = t.client();
    const a = (await body(await t.request(apiKey, PATH, { method: "POST", json: amqpEndpoint() }), 201)).data;
    expect(a).toEqual({
      id: a.id,
      type: "amqp",
      url: `amqp://127.0.0.1:${rabbit.port}/${rabbit.vhost}`,
      exchange: "genrelay",
      routing_key: null,
      events: ["task.succeeded", "task.failed", "task.canceled"],
      description: null,
      created_at: new Date(t.clock.now()).toISOString(),
    });
    const n = (
      await body(
        await t.request(apiKey, PATH, {
          method: "POST",
          json: { type: "nats", url: `nats://app:pa55word@127.0.0.1:${nats.port}`, token: "tok-never-shown" },
        }),
        201,
      )
    ).data;
    expect(n).toMatchObject({ type: "nats", url: `nats://127.0.0.1:${nats.port}`, subject: null });
    const s = (await body(await t.request(apiKey, PATH, { method: "POST", json: sqsEndpoint() }), 201)).data;
    expect(s).toMatchObject({
      type: "sqs",
      url: queueUrl,
      queue_url: queueUrl,
      region: "us-east-1",
      access_key_id: "test",
      endpoint: sqs.url,
    });
    const listed = JSON.stringify(await body(await t.request(apiKey, PATH), 200));
    const stored = JSON.stringify(t.database.sqlite.prepare("SELECT * FROM webhook_endpoints").all());
    for (const secret of ["guest:guest", "pa55word", "tok-never-shown", "s3cr3t-never-shown"]) {
      expect(listed).not.toContain(secret);
      expect(stored).not.toContain(secret);
    }
  });

  it("refuses bad settings with 422 validation_error naming each field", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const post = async (json: unknown) => body(await t.request(apiKey, PATH, { method: "POST", json }), 422);
    expect(await post({ type: "amqp", url: "http://mq.example.com", exchange: "x y" })).toEqual({
      error: {
        code: "validation_error",
        message: "Some amqp settings are invalid.",
        request_id: expect.any(String),
        details: [
          { field: "url", message: "scheme must be amqp:// or amqps://" },
          { field: "exchange", message: "at most 255 letters, digits, '-', '_', '.', ':' or '/'" },
        ],
      },
    });
    expect(await post({ type: "nats", url: "nats://nats.example.com:4222", subject: "genrelay.*" })).toEqual({
      error: {
        code: "validation_error",
        message: "Some nats settings are invalid.",
        request_id: expect.any(String),
        details: [{ field: "subject", message: "a subject: dot-separated tokens, no wildcards (* >) or whitespace" }],
      },
    });
    expect((await post({ ...sqsEndpoint(), region: "Mars" })).error.details).toEqual([
      { field: "region", message: "an AWS region such as eu-west-1" },
    ]);
    expect((await post({ type: "kafka", url: "kafka://x" })).error).toMatchObject({
      code: "validation_error",
      details: [{ field: "type", message: "must be one of webhook, amqp, nats, sqs" }],
    });
    expect((await post({ type: "amqp", url: "amqp://mq.example.com" })).error.details).toEqual([
      { field: "exchange", message: expect.any(String) },
    ]);
  });

  it("refuses a loopback broker unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true", async () => {
    const { t } = setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const { apiKey } = t.client();
    const res = await body(await t.request(apiKey, PATH, { method: "POST", json: amqpEndpoint() }), 422);
    expect(res).toEqual({
      error: {
        code: "validation_error",
        message: "Some amqp settings are invalid.",
        request_id: expect.any(String),
        details: [
          {
            field: "url",
            message: "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
          },
        ],
      },
    });
  });
});

describe("queue endpoints: delivery", () => {
  it("task.succeeded reaches RabbitMQ, NATS and SQS as a message standardwebhooks verifies", async () => {
    const { t, up } = setup();
    const { apiKey, secret } = t.client();
    for (const json of [amqpEndpoint(), { type: "nats", url: nats.url }, sqsEndpoint()])
      await body(await t.request(apiKey, PATH, { method: "POST", json }), 201);
    const id = await succeededTask(t, up, apiKey);
    await deliverAll(t);

    const ch = await admin.createChannel();
    const fromRabbit = await ch.get("app", { noAck: true });
    await ch.close();
    expect(fromRabbit).not.toBe(false);
    const nc = await connect({ servers: nats.url });
    const fromNats = await (await jetstreamManager(nc)).streams.getMessage("EVENTS", {
      last_by_subj: "genrelay.task.succeeded",
    });
    await nc.close();
    const [fromSqs] =
      (await sqsAdmin.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MessageAttributeNames: ["All"] })))
        .Messages ?? [];

    const received: Array<[string, Record<string, string>]> = [];
    if (fromRabbit) received.push([fromRabbit.content.toString("utf8"), fromRabbit.properties.headers as never]);
    if (fromNats) {
      const h: Record<string, string> = {};
      for (const [name, values] of fromNats.header) h[name.toLowerCase()] = values[0]!;
      received.push([fromNats.string(), h]);
    }
    if (fromSqs) {
      const h: Record<string, string> = {};
      for (const [name, v] of Object.entries(fromSqs.MessageAttributes ?? {})) h[name] = v.StringValue!;
      received.push([fromSqs.Body!, h]);
    }
    expect(received).toHaveLength(3);
    const ids = new Set<string>();
    for (const [text, headers] of received) {
      const event = verifyMessage(secret, text, headers) as {
        id: string;
        type: string;
        data: { id: string; status: string };
      };
      expect(event).toMatchObject({ type: "task.succeeded", data: { id, status: "succeeded" } });
      expect(headers["webhook-id"]).toBe(event.id);
      ids.add(event.id);
    }
    // One event, one webhook-id, at every destination.
    expect(ids.size).toBe(1);
    const log = await attempts(t, apiKey, id);
    expect(JSON.stringify(log)).toContain("confirmed by RabbitMQ");
    expect(JSON.stringify(log)).toContain('PubAck: stream \\"EVENTS\\"');
    expect(JSON.stringify(log)).toContain("MD5s match");
  });

  it("an Ed25519 client's RabbitMQ, NATS and SQS messages carry v1a only, verified with the key its JWKS publishes", async () => {
    const { t, up } = setup();
    const client = t.client();
    await body(
      await t.request(client.apiKey, "/openapi/v1/webhooks/settings", {
        method: "PUT",
        json: { signature: "ed25519" },
      }),
      200,
    );
    // Past the switch's 24-hour overlap, when the hmac v1 signature still came beside v1a: v1a only.
    t.clock.advance(24 * 60 * 60_000 + 1_000);
    for (const kind of ["amqp", "nats", "sqs"] as const)
      await body(
        await t.request(client.apiKey, PATH, { method: "POST", json: QUEUES[kind]("ed25519").endpoint() }),
        201,
      );
    const id = await succeededTask(t, up, client.apiKey);
    await deliverAll(t);

    // The key as a consumer gets it: the client's published JWKS, fetched without an API key.
    const jwks = await body(await t.relay.app.request(`http://relay.test/openapi/v1/webhooks/jwks/${client.id}`), 200);
    expect(jwks.keys).toHaveLength(1);
    const published = `whpk_${Buffer.from(jwks.keys[0].x, "base64url").toString("base64")}`;
    for (const kind of ["amqp", "nats", "sqs"] as const) {
      const consumed = await QUEUES[kind]("ed25519").read();
      expect(consumed, kind).toHaveLength(1);
      const [text, headers] = consumed[0]!;
      const message = { headers, body: text };
      expect(headers["webhook-signature"], kind).toMatch(/^v1a,\S+$/);
      const { v1a, byNew } = v1aOfRotation(message, published);
      expect(byNew, kind).toBe(headers["webhook-signature"]);
      expect(v1a, kind).toEqual([byNew]);
      // The key verifies this message only: another body under the same headers fails.
      expect(v1aOfRotation({ headers, body: text.replace(id, "tsk_other") }, published).byNew, kind).toBeUndefined();
      expect(JSON.parse(text), kind).toMatchObject({ type: "task.succeeded", data: { id, status: "succeeded" } });
      if (kind === "nats") expect(headers["nats-msg-id"]).toBe(headers["webhook-id"]);
    }
  });

  it("an unroutable AMQP message and a missing JetStream stream are failed attempts naming why", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    await body(await t.request(apiKey, PATH, { method: "POST", json: amqpEndpoint("nobody.listens") }), 201);
    await addNatsEndpoint(t, apiKey, "nowhere.events");
    const id = await succeededTask(t, up, apiKey);
    await t.relay.dispatcher.runOnce();
    const log = JSON.stringify(await attempts(t, apiKey, id));
    expect(log).toContain(
      'no queue bound: RabbitMQ returned the message (312 NO_ROUTE) from exchange \\"genrelay\\" with routing key \\"nobody.listens\\"',
    );
    expect(log).toContain(
      'no JetStream stream for subject \\"nowhere.events\\" (no responders): create a stream that captures it',
    );
  });

  for (const kind of ["amqp", "nats", "sqs"] as const)
    it(`a ${kind} broker stopped mid-run, then restarted, gets every message at least once with its webhook-id`, async () => {
      const outage = QUEUES[kind]("outage");
      const { t, up } = setup();
      const { apiKey, secret } = t.client();
      await body(await t.request(apiKey, PATH, { method: "POST", json: outage.endpoint() }), 201);
      // One message before the outage: the relay holds an open connection when the broker goes.
      const before = await succeededTask(t, up, apiKey);
      await t.relay.dispatcher.runOnce();
      expect(await attemptOutcomes(t, apiKey, before)).toEqual(["succeeded"]);
      await outage.broker().stop();
      const during: string[] = [];
      try {
        for (let n = 0; n < 2; n++) during.push(await succeededTask(t, up, apiKey));
        await t.relay.dispatcher.runOnce();
        for (const id of during) expect(await attemptOutcomes(t, apiKey, id)).toEqual(["failed"]);
      } finally {
        await outage.broker().start();
      }
      await outage.restarted?.();
      await deliverAll(t, 4);
      for (const id of during) expect(await attemptOutcomes(t, apiKey, id)).toEqual(["failed", "succeeded"]);

      // A consumer after the outage: every task's task.succeeded, verified, under its event's id.
      const byTask = new Map<string, Set<string>>();
      for (const [text, headers] of await outage.read()) {
        const event = verifyMessage(secret, text, headers) as { id: string; type: string; data: { id: string } };
        expect(headers["webhook-id"]).toBe(event.id);
        expect(event.type).toBe("task.succeeded");
        byTask.set(event.data.id, (byTask.get(event.data.id) ?? new Set()).add(event.id));
      }
      expect([...byTask.keys()].sort()).toEqual([before, ...during].sort());
      for (const ids of byTask.values()) expect(ids.size).toBe(1);
    }, 120_000);

  it("one client's stalled broker does not delay another client's message", async () => {
    const { t, up } = setup({ WEBHOOK_TIMEOUT_MS: "3000" });
    const hole = await blackHole();
    suite.cleanup(() => hole.close());
    const stalled = t.client("stalled");
    const healthy = t.client("healthy");
    await body(
      await t.request(stalled.apiKey, PATH, {
        method: "POST",
        json: { type: "amqp", url: `amqp://guest:guest@127.0.0.1:${hole.port}`, exchange: "genrelay" },
      }),
      201,
    );
    await addNatsEndpoint(t, healthy.apiKey, "genrelay.neighbour");
    const stalledTask = await succeededTask(t, up, stalled.apiKey);
    const healthyTask = await succeededTask(t, up, healthy.apiKey);
    const started = Date.now();
    const run = t.relay.dispatcher.runOnce();
    // The healthy client's message is stored while the stalled client's attempt still waits on its broker.
    const nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    let stored: Awaited<ReturnType<typeof jsm.streams.getMessage>> = null;
    while (!stored && Date.now() - started < 2_500)
      stored = await jsm.streams.getMessage("EVENTS", { last_by_subj: "genrelay.neighbour" }).catch(() => null);
    await nc.close();
    const healthyAt = Date.now() - started;
    expect(stored).not.toBeNull();
    expect(JSON.parse(stored!.string()).data.id).toBe(healthyTask);
    expect(t.relay.dispatcher.inFlightOf(stalled.id)).toBe(1);
    await run;
    // The stalled attempt failed at its deadline and freed its slot.
    expect(t.relay.dispatcher.inFlightOf(stalled.id)).toBe(0);
    expect(Date.now() - started).toBeGreaterThan(healthyAt);
    expect(JSON.stringify(await attempts(t, stalled.apiKey, stalledTask))).toContain(
      `connecting to RabbitMQ at 127.0.0.1:${hole.port} took longer than its deadline of 3000 ms`,
    );
  });
});

import { CreateQueueCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqsDestination, type SqsTarget } from "../../src/destinations/sqs.js";
import { generateWebhookSecret } from "../../src/webhooks/sign.js";
import { blackHole, signedMessage, type SqsBroker, startSqs } from "../helpers/brokers.js";

/** The SQS client against an SQS-compatible server on loopback (docs/destinations.md, "Delivered means confirmed"). */
describe("SqsDestination", () => {
  let sqs: SqsBroker;
  let admin: SQSClient;
  let standard: string;
  let fifo: string;
  const secret = generateWebhookSecret();

  beforeAll(async () => {
    sqs = await startSqs();
    admin = new SQSClient({
      region: sqs.region,
      endpoint: sqs.url,
      credentials: { accessKeyId: sqs.accessKeyId, secretAccessKey: sqs.secretAccessKey },
    });
    standard = (await admin.send(new CreateQueueCommand({ QueueName: "webhooks" }))).QueueUrl!;
    fifo = (await admin.send(new CreateQueueCommand({ QueueName: "webhooks.fifo", Attributes: { FifoQueue: "true" } })))
      .QueueUrl!;
  });
  afterAll(async () => {
    admin?.destroy();
    await sqs?.close();
  });

  const target = (queueUrl: string): SqsTarget => ({
    queueUrl,
    region: sqs.region,
    accessKeyId: sqs.accessKeyId,
    secretAccessKey: sqs.secretAccessKey,
    endpoint: sqs.url,
  });
  const receive = async (queueUrl: string) =>
    (
      await admin.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          MessageAttributeNames: ["All"],
          MessageSystemAttributeNames: ["All"],
          AttributeNames: ["All"],
        }),
      )
    ).Messages ?? [];

  it("sends the webhook with matching MD5s, and a consumer verifies it from the attributes", async () => {
    const dest = new SqsDestination({ allowPrivateNetworks: true });
    const signed = signedMessage(secret);
    const result = await dest.publish(target(standard), signed, 5_000);
    expect(result).toMatchObject({ ok: true, error: null });
    expect(result.responseBody).toMatch(/^SQS MessageId [\w-]+, MD5s match$/);
    const [got, ...rest] = await receive(standard);
    expect(rest).toEqual([]);
    expect(got?.Body).toBe(signed.body);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(got?.MessageAttributes ?? {})) headers[name] = value.StringValue!;
    expect(Object.keys(headers).sort()).toEqual([
      "content-type",
      "webhook-id",
      "webhook-signature",
      "webhook-timestamp",
    ]);
    expect(new Webhook(secret).verify(got!.Body!, headers)).toEqual(JSON.parse(signed.body));
    await dest.close();
  });

  it("a FIFO queue gets the task as group and the webhook-id as de-duplication id: a retry is stored once", async () => {
    const dest = new SqsDestination({ allowPrivateNetworks: true });
    const signed = signedMessage(secret, { taskId: "task_fifo" });
    const first = await dest.publish(target(fifo), signed, 5_000);
    const retry = await dest.publish(target(fifo), signed, 5_000);
    expect(first.responseBody).toMatch(/^SQS MessageId [\w-]+, SequenceNumber \d+, MD5s match$/);
    expect(retry.ok).toBe(true);
    const got = await receive(fifo);
    expect(got.map((m) => [m.Body, m.Attributes?.MessageGroupId, m.Attributes?.MessageDeduplicationId])).toEqual([
      [signed.body, "task_fifo", signed.id],
    ]);
    await dest.close();
  });

  it("the address guard refuses a loopback endpoint unless private networks are allowed", async () => {
    const dest = new SqsDestination({ allowPrivateNetworks: false });
    const result = await dest.publish(target(standard), signedMessage(secret), 5_000);
    expect(result).toMatchObject({ ok: false, blocked: true, error: "broker address 127.0.0.1 is loopback" });
    await dest.close();
  });

  it("a service that never answers is a deadline failure", async () => {
    const hole = await blackHole();
    const dest = new SqsDestination({ allowPrivateNetworks: true });
    const url = `http://127.0.0.1:${hole.port}`;
    const result = await dest.publish(
      { ...target(`${url}/123456789012/webhooks`), endpoint: url },
      signedMessage(secret),
      300,
    );
    expect(result).toMatchObject({
      ok: false,
      error: `publishing to SQS at 127.0.0.1:${hole.port} took longer than its deadline of 300 ms`,
    });
    expect(dest.openConnections).toBe(0);
    await hole.close();
    await dest.close();
  });
});

import { createHash } from "node:crypto";
import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import { type MessageAttributeValue, SendMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import type { SendResult } from "../webhooks/sender.js";
import { createGuardedLookup } from "../net/address-guard.js";
import { BrokerClient, brokerHostOf, type QueueClientOptions } from "./broker-client.js";
import type { QueueMessage } from "./queue-message.js";

/**
 * Amazon SQS destinations (docs/destinations.md, "Delivered means confirmed"): one SendMessage per webhook, delivered
 * when SQS answers with the MD5s of the body and of the attributes we sent (checked here, so a
 * message damaged on the way is a failed attempt). A FIFO queue (`….fifo`) gets the task id as
 * `MessageGroupId` (a task's events stay in order) and the `webhook-id` as
 * `MessageDeduplicationId` (a retry within SQS's 5-minute window is stored once).
 */
export interface SqsTarget {
  queueUrl: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** An SQS-compatible endpoint instead of AWS's; null: the queue URL's origin. */
  endpoint: string | null;
}

/** The host the requests go to: the endpoint's, or the queue URL's. */
export function sqsHost(target: Pick<SqsTarget, "queueUrl" | "endpoint">): URL {
  return new URL(target.endpoint ?? target.queueUrl);
}

export class SqsDestination extends BrokerClient<SQSClient> {
  private readonly lookup: ReturnType<typeof createGuardedLookup>;

  constructor(opts: QueueClientOptions) {
    super(opts, (c) => c.destroy());
    this.lookup = createGuardedLookup(opts);
  }

  publish(target: SqsTarget, message: QueueMessage, timeoutMs: number): Promise<SendResult> {
    const origin = sqsHost(target);
    return this.publishWith({
      key: `${message.tenant}|${origin.origin}|${target.region}|${target.accessKeyId}|${target.secretAccessKey}`,
      broker: `SQS at ${brokerHostOf(origin, origin.protocol === "http:" ? "80" : "443")}`,
      timeoutMs,
      open: async () => {
        // The guard first: a refused host is `blocked` (nothing sent); the agents' lookup vets each connection again.
        await this.resolve(origin.hostname);
        return this.client(target, origin);
      },
      send: (client, cancel) => this.send(client, target, message, cancel.signal),
    });
  }

  private client(target: SqsTarget, origin: URL): SQSClient {
    const agentOptions = { keepAlive: true, maxSockets: 16, lookup: this.lookup };
    return new SQSClient({
      region: target.region,
      credentials: { accessKeyId: target.accessKeyId, secretAccessKey: target.secretAccessKey },
      ...(target.endpoint ? { endpoint: origin.origin } : {}),
      maxAttempts: 1,
      // Checked below, naming which digest did not match.
      md5: false,
      requestHandler: {
        ...(origin.protocol === "http:" ? { httpAgent: new HttpAgent(agentOptions) } : {}),
        httpsAgent: new HttpsAgent(agentOptions),
        connectionTimeout: this.connectTimeoutMs,
      },
    });
  }

  private async send(client: SQSClient, target: SqsTarget, message: QueueMessage, signal: AbortSignal) {
    const attributes: Record<string, MessageAttributeValue> = {};
    for (const [name, value] of Object.entries(message.headers))
      attributes[name] = { DataType: "String", StringValue: value };
    const fifo = target.queueUrl.endsWith(".fifo");
    const out = await client.send(
      new SendMessageCommand({
        QueueUrl: target.queueUrl,
        MessageBody: message.body,
        MessageAttributes: attributes,
        ...(fifo ? { MessageGroupId: message.taskId, MessageDeduplicationId: message.id } : {}),
      }),
      { abortSignal: signal },
    );
    const bodyMd5 = createHash("md5").update(message.body, "utf8").digest("hex");
    if (out.MD5OfMessageBody !== bodyMd5)
      throw new Error(`SQS answered MD5OfMessageBody ${out.MD5OfMessageBody ?? "(none)"}, the body's is ${bodyMd5}`);
    const attributesMd5 = md5OfMessageAttributes(attributes);
    if (out.MD5OfMessageAttributes !== attributesMd5)
      throw new Error(
        `SQS answered MD5OfMessageAttributes ${out.MD5OfMessageAttributes ?? "(none)"}, the attributes' is ${attributesMd5}`,
      );
    return `SQS MessageId ${out.MessageId}${out.SequenceNumber ? `, SequenceNumber ${out.SequenceNumber}` : ""}, MD5s match`;
  }
}

/**
 * The MD5 SQS computes over string message attributes: for each attribute by name, the name, the
 * data type (each a 4-byte big-endian length, then the UTF-8 bytes), the transport byte 1
 * (string) and the value (length, then bytes).
 */
export function md5OfMessageAttributes(attributes: Record<string, MessageAttributeValue>): string {
  const hash = createHash("md5");
  const field = (text: string) => {
    const bytes = Buffer.from(text, "utf8");
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length);
    hash.update(bytes);
  };
  for (const name of Object.keys(attributes).sort()) {
    const value = attributes[name]!;
    field(name);
    field(value.DataType ?? "String");
    hash.update(Buffer.from([1]));
    field(value.StringValue ?? "");
  }
  return hash.digest("hex");
}

// An AWS Lambda function triggered by the SQS queue of an `sqs` endpoint (docs/destinations.md):
// verifies each record's Standard Webhooks signature with the `standardwebhooks` package and handles
// each event once. Turn on "Report batch item failures" in the trigger: a record that fails
// verification is reported, so SQS keeps it (and moves it to the queue's dead-letter queue in the end)
// while the rest of the batch is deleted.
//
//   npm install standardwebhooks    (bundled with the function; handler: sqs-lambda-handler.handler)
//   environment: GENRELAY_WEBHOOK_SECRET=whsec_…
import { Webhook } from "standardwebhooks";

const wh = new Webhook(process.env.GENRELAY_WEBHOOK_SECRET); // the client's "whsec_…" secret
const seen = new Set(); // per warm instance only: keep the ids in a table (DynamoDB, say) in production

/** Your work goes here (store the output, notify someone…); this one logs the event as one JSON line. */
async function handle(event) {
  console.log(JSON.stringify({ id: event.id, type: event.type, data: event.data })); // data.output, data.usage, data.metadata…
}

export async function handler(sqsEvent) {
  const batchItemFailures = [];
  for (const record of sqsEvent.Records) {
    const headers = {}; // webhook-id, webhook-timestamp, webhook-signature: string message attributes
    for (const [name, attribute] of Object.entries(record.messageAttributes ?? {}))
      headers[name] = attribute.stringValue;
    let event;
    try {
      // Throws on a bad signature, or a timestamp more than 5 minutes off (read a backlog promptly).
      event = wh.verify(record.body, headers); // the raw body, before any JSON parsing
    } catch (err) {
      console.error(`rejected: ${err.message}`);
      batchItemFailures.push({ itemIdentifier: record.messageId });
      continue;
    }
    if (!seen.has(event.id)) {
      seen.add(event.id); // delivery is at least once: a retry brings the same id again
      await handle(event);
    }
  }
  return { batchItemFailures };
}

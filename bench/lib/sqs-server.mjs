// An SQS-compatible server (local-aws-sqs) in a process of its own, for bench/queues.mjs.
import { createSqsServer } from "local-aws-sqs";

const server = await createSqsServer({
  port: Number(process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  emulateQueueCreationLifecycle: false,
});
process.stdout.write(`sqs listening on http://127.0.0.1:${server.address().port}\n`);
process.on("SIGTERM", () => server.close(() => process.exit(0)));

// The queue baseline (forked, driven over IPC): the broker's own client publishing a webhook body
// `total` times, `concurrency` publishes in flight, each waiting for the broker's confirmation as the
// relay does (a RabbitMQ publisher confirm under `mandatory`, a JetStream PubAck, an SQS SendMessage
// answer), with headers of the relay's names and sizes. No signing, no database.
import { serveIpc } from "./lib/proc.mjs";
import { publishers } from "./lib/queue-publishers.mjs";

let client = null;

serveIpc({
  async connect({ kind, target }) {
    client = await publishers[kind](target);
    return null;
  },
  async publish({ body, headers, total, concurrency, idPrefix }) {
    let next = 0;
    let failed = 0;
    const started = performance.now();
    const worker = async () => {
      while (next < total) {
        const id = `${idPrefix}${String(next++).padStart(9, "0")}`;
        try {
          await client.send(body, { ...headers, "webhook-id": id }, id);
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const seconds = (performance.now() - started) / 1000;
    return { ok: total - failed, failed, seconds, rate: (total - failed) / seconds };
  },
  async close() {
    await client?.close();
    client = null;
    return null;
  },
});

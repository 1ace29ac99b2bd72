import { createServer } from "node:net";
import type { TestProject } from "vitest/node";
import type { ProcessBroker } from "../helpers/brokers.js";

/**
 * One RabbitMQ for the whole run (vitest globalSetup), started only when a file first asks for it
 * (test/helpers/brokers.ts, `sharedRabbit`): a node boots Erlang for about 4.6 s of CPU, and five
 * files use one. Each asking file gets a virtual host of its own, so its exchanges and queues stay
 * apart from the others'; the node's virtual hosts are made at boot (a definitions file), as a
 * rabbitmqctl call would boot Erlang again. A file asks through a loopback control port (one line
 * in, one JSON line out), which vitest provides as `rabbitControlPort`.
 */

declare module "vitest" {
  export interface ProvidedContext {
    rabbitControlPort: number;
  }
}

/** More files than this asking in one run is a new file: raise it. */
const VHOSTS = Array.from({ length: 16 }, (_, i) => `file-${i + 1}`);

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let node: Promise<ProcessBroker> | null = null;
  let handedOut = 0;
  const answer = async (): Promise<{ port: number; vhost: string }> => {
    const vhost = VHOSTS[handedOut++];
    if (!vhost) throw new Error(`more than ${VHOSTS.length} files asked for the shared RabbitMQ: raise VHOSTS`);
    node ??= import("../helpers/brokers.js").then(({ startRabbit }) => startRabbit(VHOSTS));
    return { port: (await node).port, vhost };
  };
  // allowHalfOpen: the asking file ends its side after its line and still reads the answer.
  const control = createServer({ allowHalfOpen: true }, (socket) => {
    socket.on("error", () => {});
    socket.once("data", () => {
      answer().then(
        (a) => socket.end(`${JSON.stringify(a)}\n`),
        (err: Error) => socket.end(`${JSON.stringify({ error: err.message })}\n`),
      );
    });
  });
  await new Promise<void>((resolve) => control.listen(0, "127.0.0.1", resolve));
  project.provide("rabbitControlPort", (control.address() as { port: number }).port);
  return async () => {
    await new Promise<void>((resolve) => control.close(() => resolve()));
    if (node) await (await node.catch(() => null))?.close();
  };
}

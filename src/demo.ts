/**
 * `npm run demo`: genrelay end to end on loopback, in under a minute. Starts the upstream simulator,
 * the relay and a small webhook receiver, creates a client, submits one image and one video task,
 * and prints each webhook once its Standard Webhooks signature verifies. Exits 0 when both tasks
 * have been pushed, 1 if anything is missing after a bounded wait.
 */
import { serve } from "@hono/node-server";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { systemClock } from "./clock.js";
import { loadConfig } from "./config.js";
import { openStore } from "./open-store.js";
import { createLogger } from "./logger.js";
import { Relay } from "./relay.js";
import { createClient } from "./services/clients.js";
import { startSimulator } from "./simulator/server.js";

const WAIT_MS = 60_000;
const say = (line: string) => process.stdout.write(`${line}\n`);

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

async function main(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "genrelay-demo-"));
  const config = loadConfig({
    DATABASE_PATH: join(dir, "demo.db"),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    LOG_LEVEL: "warn",
  });
  const logger = createLogger(config.logLevel);
  const simulator = await startSimulator({
    accounts: [{ apiKey: "sandbox" }],
    timings: { imageQueuedMs: 500, imageProcessingMs: 1_500, videoQueuedMs: 1_000, videoProcessingMs: 4_000 },
  });
  const store = await openStore(config);
  const relay = new Relay({
    config,
    store,
    clock: systemClock,
    logger,
    upstream: { baseUrl: simulator.url, apiKey: "sandbox" },
  });
  await relay.start();
  const server = serve({ fetch: relay.app.fetch, createServer: relay.createServer, port: 0, hostname: "127.0.0.1" });
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  const relayUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const { apiKey, webhookSecret } = await createClient(
    { store, clock: systemClock },
    { name: "demo", encryptionKey: config.encryptionKey },
  );
  const verifier = new Webhook(webhookSecret);
  const pending = new Set<string>();
  let resolveAll: () => void = () => {};
  const allDelivered = new Promise<void>((resolve) => (resolveAll = resolve));

  const receiver = createServer((req, res) => {
    void readBody(req).then((body) => {
      const headers = {
        "webhook-id": String(req.headers["webhook-id"] ?? ""),
        "webhook-timestamp": String(req.headers["webhook-timestamp"] ?? ""),
        "webhook-signature": String(req.headers["webhook-signature"] ?? ""),
      };
      let event: {
        type: string;
        data: { id: string; status: string; output: unknown; usage: { points_charged: number | null } };
      };
      try {
        event = verifier.verify(body, headers) as typeof event;
      } catch (err) {
        say(`receiver: REJECTED a webhook: ${(err as Error).message}`);
        res.writeHead(400).end();
        return;
      }
      say(`receiver: verified ${event.type} for ${event.data.id} (webhook-id ${headers["webhook-id"]})`);
      say(
        `          status=${event.data.status} points_charged=${event.data.usage.points_charged} output=${JSON.stringify(event.data.output)}`,
      );
      res.writeHead(204).end();
      pending.delete(event.data.id);
      if (pending.size === 0) resolveAll();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const callbackUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks`;

  say(`genrelay demo: relay ${relayUrl}, simulated upstream ${simulator.url}, receiver ${callbackUrl}`);
  const submit = async (path: string, body: Record<string, unknown>, key: string) => {
    const res = await fetch(`${relayUrl}/openapi/v1/${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({ ...body, callback_url: callbackUrl, metadata: { demo: "true" } }),
    });
    const json = (await res.json()) as { data: { id: string; status: string } };
    if (res.status !== 201) throw new Error(`POST ${path} answered ${res.status}: ${JSON.stringify(json)}`);
    say(`created ${json.data.id} (${path.split("/")[0]}) → ${res.status} ${json.data.status}`);
    pending.add(json.data.id);
  };
  const started = Date.now();
  let code = 0;
  try {
    await submit(
      "images/generations",
      { model: "p-image", mode: "generate", prompt: "a lighthouse at dawn, watercolor", count: 1, size: "1K" },
      `demo-image-${started}`,
    );
    await submit(
      "videos/generations",
      { model: "v-video", video_mode: "t2v", prompt: "waves rolling under moonlight", duration: 5, resolution: "480p" },
      `demo-video-${started}`,
    );
    const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), WAIT_MS).unref());
    if ((await Promise.race([allDelivered, timeout])) === "timeout") {
      say(`demo FAILED: no verified webhook after ${WAIT_MS / 1000} s for ${[...pending].join(", ")}`);
      code = 1;
    } else {
      say(`demo OK: both tasks pushed and verified in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    }
  } catch (err) {
    say(`demo FAILED: ${(err as Error).message}`);
    code = 1;
  }
  server.close();
  receiver.close();
  await relay.stop(2_000);
  await simulator.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  return code;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`demo failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);

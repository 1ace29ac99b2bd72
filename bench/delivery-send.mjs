// What the relay's send path costs around undici (issue #43, fourteenth round): one process POSTs
// a webhook body to a loopback receiver in another process, 8 in flight, through each of
//   pool:    a bare undici Pool and `res.body.dump()` (bench/proto/delivery.mjs's transport),
//   sender:  WebhookSender.send of a build (tenant Agent, deadline, cancel signal, answer read),
//   port:    the whole attempt send of a build: the message signed (deliveryMessage), traced
//            (tracedSend, tracing off) through the destination port's `webhook` kind,
// CPU µs a request from process.cpuUsage() over N requests after a warm-up (and the scavenges
// a 1,000 requests, as the garbage made), variants and builds
// rotated in each round, medians of the rounds. The receiver's CPU is not counted.
//   node bench/delivery-send.mjs OLD_DIST NEW_DIST [rounds=5] [requests=10000]
import { fork } from "node:child_process";
import { createServer } from "node:http";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { constants, PerformanceObserver } from "node:perf_hooks";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const self = fileURLToPath(import.meta.url);
const PER_HOST = 8;
const BODY = JSON.stringify({
  type: "task.succeeded",
  data: { id: "task_01jf3y8k2m9q7r5t3v1w0x6z4a", status: "succeeded", output: ["https://example.com/a.png"] },
});

async function runChild() {
  const [variant, dist, url, n] = process.argv.slice(3);
  const total = Number(n);
  const load = (m) => import(pathToFileURL(resolve(dist, m)).href);
  let send;
  let close;
  if (variant === "pool") {
    const { Pool } = await import("undici");
    const target = new URL(url);
    const pool = new Pool(target.origin, { connections: PER_HOST, pipelining: 1, keepAliveTimeout: 60_000 });
    send = () =>
      pool
        .request({
          path: target.pathname,
          method: "POST",
          headers: { "content-type": "application/json", "webhook-id": "evt_1" },
          body: BODY,
          headersTimeout: 10_000,
          bodyTimeout: 10_000,
        })
        .then(async (res) => {
          await res.body.dump();
          return res.statusCode;
        });
    close = () => pool.close();
  } else {
    const { WebhookSender } = await load("webhooks/sender.js");
    const sender = new WebhookSender({ allowPrivateNetworks: true, connections: PER_HOST });
    close = () => sender.close();
    if (variant === "sender") {
      send = () =>
        sender.send({
          url,
          headers: { "content-type": "application/json", "webhook-id": "evt_1" },
          body: BODY,
          timeoutMs: 10_000,
          tenant: "cli_1",
        });
    } else {
      const { webhookDestinations } = await load("destinations/http.js");
      const { deliveryMessage } = await load("workers/delivery/message.js");
      const { tracedSend } = await load("workers/delivery/traced.js");
      const { generateWebhookSecret } = await load("webhooks/sign.js");
      const destinations = webhookDestinations(sender, { allowPrivateNetworks: true });
      const client = { id: "cli_1", signatureScheme: "hmac", webhookSecret: generateWebhookSecret() };
      let i = 0;
      send = () => {
        const event = {
          id: `evt_${i++}`,
          webhookId: null,
          endpointId: null,
          callbackUrl: url,
          clientId: "cli_1",
          payload: BODY,
          callbackHeaders: null,
          type: "task.succeeded",
          taskId: "task_1",
          attempts: 0,
          traceparent: null,
          tracestate: null,
        };
        return tracedSend(
          destinations,
          deliveryMessage(event, client, Date.now(), null),
          { timeoutMs: 10_000 },
          { trace: null, resendCount: 0 },
        );
      };
    }
  }
  const drive = async (count) => {
    let next = 0;
    const worker = async () => {
      while (next < count) {
        next++;
        await send();
      }
    };
    await Promise.all(Array.from({ length: PER_HOST }, worker));
  };
  await drive(Math.min(5_000, total));
  const c0 = process.cpuUsage();
  let scavenges = 0;
  const gcs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) scavenges++;
  });
  gcs.observe({ entryTypes: ["gc"] });
  await drive(total);
  const c = process.cpuUsage(c0);
  await new Promise((r) => setImmediate(r));
  gcs.disconnect();
  await close();
  process.send({ us: (c.user + c.system) / total, scav: (1000 * scavenges) / total });
  process.exit(0);
}

async function main() {
  const [oldArg, newArg, roundsArg, nArg] = process.argv.slice(2);
  if (!oldArg || !newArg) throw new Error("usage: node bench/delivery-send.mjs OLD_DIST NEW_DIST [rounds] [requests]");
  const rounds = Number(roundsArg ?? 5);
  const n = Number(nArg ?? 10_000);
  const receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.end("ok"));
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${receiver.address().port}/hook`;
  const runs = [
    ["pool", resolve(newArg)],
    ["sender old", resolve(oldArg)],
    ["sender new", resolve(newArg)],
    ["port old", resolve(oldArg)],
    ["port new", resolve(newArg)],
  ];
  const out = Object.fromEntries(runs.map(([name]) => [name, []]));
  const scav = Object.fromEntries(runs.map(([name]) => [name, []]));
  const load0 = loadAverage();
  for (let r = 0; r < rounds; r++) {
    const order = runs.map((_, i) => runs[(i + r) % runs.length]);
    for (const [name, dist] of order) {
      const child = fork(self, ["--child", name.split(" ")[0], dist, url, String(n)], { stdio: "inherit" });
      const [msg] = await Promise.all([
        new Promise((res) => child.once("message", res)),
        new Promise((res) => child.once("exit", res)),
      ]);
      out[name].push(msg.us);
      scav[name].push(msg.scav);
    }
  }
  receiver.close();
  console.log(`CPU µs a request, ${n} requests a run, ${rounds} rounds (load ${load0} → ${loadAverage()})`);
  for (const [name, v] of Object.entries(out))
    console.log(
      `${name.padEnd(12)} ${median(v).toFixed(1).padStart(7)} µs   (${v.map((x) => x.toFixed(1)).join(" / ")})   ${median(scav[name])?.toFixed(2)} scavenges a 1,000`,
    );
}

if (process.argv[2] === "--child") await runChild();
else await main();

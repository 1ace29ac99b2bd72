// CPU a call of the HTTP clients the relay could make its upstream calls with, on loopback (issue #43,
// the task side's twelfth round): Node's global fetch (what src/upstream/client.ts calls, the body read
// through its web stream), the same without a deadline signal, undici's own fetch on an Agent, and
// undici's Pool.request (what bench/proto/pipeline.mjs calls). A creation's POST and its small JSON
// answer, 16 in flight, 3,000 calls a round after 500 of warm-up; this process's CPU only (the server
// is a child process); the order rotated, medians of ROUNDS rounds. Then the relay's own client
// (UpstreamClient.createTask: the deadline, the span, the body read within the turn's bytes, the parse)
// from the built `dist` on its default transport (an undici pool since the thirteenth round), and
// from OLD_DIST when given (the old build: the global fetch before).
//   [ROUNDS=5] [OLD_DIST=/work/old13/dist] node bench/upstream-call-cost.mjs
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Agent, Pool, fetch as undiciFetch } from "undici";
import { median } from "./lib/stats.mjs";

/** The built UpstreamClient of `dist`, calling `base`. */
async function relayClient(dist, base) {
  const { UpstreamClient } = await import(pathToFileURL(resolve(dist, "upstream/client.js")).href);
  return new UpstreamClient({ baseUrl: base, apiKey: "x" });
}

const rounds = Number(process.env.ROUNDS ?? 5);
const server = spawn(
  process.execPath,
  [
    "-e",
    `require("node:http").createServer((q, s) => { q.resume(); q.on("end", () => { s.setHeader("content-type", "application/json"); s.end(JSON.stringify({ data: { id: "up_" + Math.random(), status: "queued" } })); }); }).listen(0, "127.0.0.1", function () { console.log(this.address().port); });`,
  ],
  { stdio: ["ignore", "pipe", "inherit"] },
);
const port = await new Promise((ok) => server.stdout.once("data", (d) => ok(Number(String(d)))));
const base = `http://127.0.0.1:${port}`;
const path = "/openapi/v1/images/generations";
const body = JSON.stringify({ model: "p-image", mode: "generate", prompt: "a lighthouse", count: 1 });
const headers = {
  authorization: "Bearer x",
  "content-type": "application/json",
  accept: "application/json",
  "idempotency-key": "k",
};
const pool = new Pool(base, { connections: 16 });
const agent = new Agent({ connections: 16 });

async function readStream(res) {
  const reader = res.body.getReader();
  const chunks = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const clients = {
  global_fetch: async () =>
    readStream(await fetch(`${base}${path}`, { method: "POST", headers, body, signal: AbortSignal.timeout(30_000) })),
  global_fetch_no_signal: async () => (await fetch(`${base}${path}`, { method: "POST", headers, body })).json(),
  undici_fetch: async () =>
    (await undiciFetch(`${base}${path}`, { method: "POST", headers, body, dispatcher: agent })).json(),
  pool_request: async () =>
    (
      await pool.request({ method: "POST", path, headers, body, headersTimeout: 30_000, bodyTimeout: 30_000 })
    ).body.json(),
};
const relayClients = [["relay_client", await relayClient("dist", base)]];
if (process.env.OLD_DIST) relayClients.push(["relay_client_old", await relayClient(process.env.OLD_DIST, base)]);
let keys = 0;
const task = { model: "p-image", mode: "generate", prompt: "a lighthouse", count: 1 };
for (const [name, client] of relayClients)
  clients[name] = async () => client.createTask("image", task, `bench-key-${keys++}`);

async function calls(fn, n) {
  let started = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (started++ < n) await fn();
    }),
  );
}

const cpu = Object.fromEntries(Object.keys(clients).map((k) => [k, []]));
try {
  for (let r = 0; r < rounds; r++) {
    const order = Object.entries(clients);
    for (const [name, fn] of r % 2 === 0 ? order : order.reverse()) {
      await calls(fn, 500);
      const before = process.cpuUsage();
      await calls(fn, 3_000);
      const used = process.cpuUsage(before);
      cpu[name].push((used.user + used.system) / 3_000);
    }
  }
  for (const [name, runs] of Object.entries(cpu))
    console.log(
      `${name.padEnd(23)} ${median(runs).toFixed(0)} µs CPU a call (rounds ${runs.map((x) => x.toFixed(0)).join(" / ")})`,
    );
} finally {
  server.kill();
  await pool.close();
  await agent.close();
  for (const [, client] of relayClients) await client.close?.();
}

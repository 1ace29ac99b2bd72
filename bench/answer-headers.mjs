// A 201's three headers two ways (issue #43), on a bare hono app served by @hono/node-server as the
// relay is: set on hono's context (c.header: a web `Headers` for the answer, turned back into an
// object by @hono/node-server) or on Node's response (src/http/middleware.ts, answerHeader: the
// answer keeps its plain-object headers). Each run is its own process: 2,000 warm-up requests, then
// 40,000 over 8 keep-alive connections from undici in the same process; CPU is the process's user +
// system time (server and client together) per request. Order alternates; medians of the rounds.
//   node bench/answer-headers.mjs [rounds=5]
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { loadAverage } from "./lib/load-gate.mjs";
import { median } from "./lib/stats.mjs";

const REQUESTS = 40_000;

async function child(way) {
  const { serve } = await import("@hono/node-server");
  const { Hono } = await import("hono");
  const { Agent, request } = await import("undici");
  const app = new Hono();
  app.post("/x", async (c) => {
    await c.req.text();
    const set = way === "outgoing" ? (n, v) => c.env.outgoing.setHeader(n, v) : (n, v) => c.header(n, v);
    set("X-Request-Id", "req_abcdefabcdefabcdef");
    set("Location", "http://127.0.0.1/openapi/v1/tasks/task_01jf3y8k2m9q7r5t3v1w0x6z4a");
    set("Idempotent-Replayed", "false");
    const body = JSON.stringify({
      data: { id: "task_01jf3y8k2m9q7r5t3v1w0x6z4a", status: "queued", prompt: "p".repeat(300) },
    });
    return c.body(body, 201, { "Content-Type": "application/json" });
  });
  const server = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  const agent = new Agent({ connections: 8 });
  const url = `http://127.0.0.1:${server.address().port}/x`;
  const one = async () => {
    const res = await request(url, {
      method: "POST",
      body: '{"a":1}',
      headers: { "content-type": "application/json" },
      dispatcher: agent,
    });
    await res.body.text();
  };
  for (let i = 0; i < 2_000; i++) await one();
  const before = process.cpuUsage();
  let sent = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (sent < REQUESTS) {
        sent++;
        await one();
      }
    }),
  );
  const used = process.cpuUsage(before);
  await agent.close();
  server.close();
  process.stdout.write(`${((used.user + used.system) / REQUESTS).toFixed(2)}\n`);
}

if (process.argv[2] === "--child") {
  await child(process.argv[3]);
} else {
  const rounds = Number(process.argv[2] ?? 5);
  const us = { headers: [], outgoing: [] };
  const loads = [loadAverage()[0]];
  for (let r = 1; r <= rounds; r++) {
    for (const way of r % 2 === 1 ? ["headers", "outgoing"] : ["outgoing", "headers"]) {
      const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), "--child", way]);
      us[way].push(Number(String(out).trim()));
    }
  }
  loads.push(loadAverage()[0]);
  const m = { headers: median(us.headers), outgoing: median(us.outgoing) };
  console.log(
    JSON.stringify({
      requests: REQUESTS,
      rounds,
      us_per_request: m,
      outgoing_vs_headers: Number((m.outgoing / m.headers).toFixed(3)),
      all: us,
      load_1m: loads,
    }),
  );
}

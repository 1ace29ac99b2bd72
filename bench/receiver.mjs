// Loopback webhook receiver for the benchmarks (forked, driven over IPC): node:http answering 200
// with an empty body. Records each arrival's time; with `parse` on, also the task's created_at and
// completed_at from the body (for the end-to-end latency), and keeps one raw request for a
// signature check.
import { createServer } from "node:http";
import { serveIpc } from "./lib/proc.mjs";

let parse = false;
let arrivals = [];
let ids = new Set();
let latencies = [];
let sample = null;
let waiters = [];

function reset(opts = {}) {
  parse = Boolean(opts.parse);
  arrivals = [];
  ids = new Set();
  latencies = [];
  sample = null;
  for (const w of waiters) w.resolve(false);
  waiters = [];
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const at = Date.now();
    arrivals.push(at);
    const id = req.headers["webhook-id"];
    if (id) ids.add(id);
    if (parse || sample === null) {
      const body = Buffer.concat(chunks).toString("utf8");
      if (sample === null) sample = { headers: req.headers, body };
      if (parse) {
        try {
          const data = JSON.parse(body).data;
          latencies.push([at, Date.parse(data.created_at), data.completed_at ? Date.parse(data.completed_at) : NaN]);
        } catch {
          // not a webhook body (raw baseline): nothing to record
        }
      }
    }
    res.writeHead(200, { "content-length": "0" });
    res.end();
    if (waiters.length > 0) {
      for (const w of [...waiters]) {
        if (arrivals.length >= w.count) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(true);
        }
      }
    }
  });
});
server.keepAliveTimeout = 60_000;
server.headersTimeout = 65_000;

function stats() {
  const n = arrivals.length;
  const first = n ? arrivals[0] : null;
  const last = n ? arrivals[n - 1] : null;
  return {
    count: n,
    unique: ids.size,
    first,
    last,
    // Arrivals per second between the first and the last arrival.
    rate: n > 1 ? ((n - 1) * 1000) / Math.max(1, last - first) : null,
  };
}

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  process.stdout.write(`receiver listening on http://127.0.0.1:${port}\n`);
  serveIpc({
    address: () => `http://127.0.0.1:${port}`,
    reset: (msg) => {
      reset(msg);
      return true;
    },
    stats: () => stats(),
    latencies: () => latencies,
    arrivals: () => arrivals,
    sample: () => sample,
    /** Resolves true once `count` webhooks arrived, false on timeout. */
    waitFor: ({ count, timeoutMs }) =>
      new Promise((resolve) => {
        if (arrivals.length >= count) return resolve(true);
        const w = { count, resolve };
        waiters.push(w);
        setTimeout(() => {
          const i = waiters.indexOf(w);
          if (i >= 0) {
            waiters.splice(i, 1);
            resolve(false);
          }
        }, timeoutMs);
      }),
  });
});

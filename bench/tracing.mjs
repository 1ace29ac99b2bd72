// Tracing (issue #42): CPU per task end to end with tracing off (this build and an older one) and
// on (every span sampled, exported over OTLP/HTTP to a loopback collector), in one run; and
// `--sample`: one task's trace from a real run, printed as a tree.
//
//   node bench/tracing.mjs            (BENCH_QUICK=1: small; BENCH_ROUNDS (3); BENCH_TRACING_TASKS (300);
//                                      BENCH_TRACING_OLD_DIST=<dist>, default /work/base/dist when present)
//   node bench/tracing.mjs --sample   (one task with a caller's traceparent; prints its spans)
//
// Per round, the three relays in rotated order, each on a fresh database against the simulator with
// zero processing time: N creations (8 at a time) until N webhooks reached a loopback receiver. CPU of
// the relay process from /proc/<pid>/stat over that window, divided by N; medians over the rounds,
// the load average at the start and end.
import { createServer } from "node:http";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { cpuMsOf, FAST_SIMULATOR_ENV, startLoopbackRelay, startSimulator } from "./lib/proc.mjs";
import { DIST } from "./lib/dist.mjs";
import { median, round } from "./lib/stats.mjs";

const QUICK = process.env.BENCH_QUICK === "1";
const loadNow = () => os.loadavg().map((x) => round(x, 2));

/** A loopback server that answers 200 and keeps what `keep` returns of each POST body. */
async function sink(keep) {
  const kept = [];
  let count = 0;
  const waiters = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
      count++;
      const k = keep?.(Buffer.concat(chunks), req);
      if (k !== undefined) kept.push(k);
      for (const w of waiters.splice(0)) w();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    kept,
    count: () => count,
    reset: () => {
      count = 0;
      kept.length = 0;
    },
    async waitFor(n, timeoutMs = 120_000) {
      const end = Date.now() + timeoutMs;
      while (count < n && Date.now() < end) await new Promise((r) => waiters.push(r) && setTimeout(r, 200));
      return count;
    },
    close: () => new Promise((r) => server.close(r)),
  };
}

const tracingEnv = (collectorUrl) => ({
  OTEL_TRACES_EXPORTER: "otlp",
  OTEL_EXPORTER_OTLP_ENDPOINT: collectorUrl,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  OTEL_TRACES_SAMPLER: "always_on",
});

async function create(relay, apiKey, callbackUrl, i, headers = {}) {
  const res = await fetch(`${relay.url}/openapi/v1/images/generations`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": `tracing-${process.pid}-${Date.now()}-${i}`,
      ...headers,
    },
    body: JSON.stringify({
      model: "p-image",
      mode: "generate",
      prompt: "a lighthouse",
      count: 1,
      callback_url: callbackUrl,
    }),
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`creation: ${res.status} ${text}`);
  return JSON.parse(text);
}

async function relayFor(dist, tmp, upstreamUrl, name, env) {
  const { relay, clients } = await startLoopbackRelay({ dist, tmp, name, upstreamUrl, clients: ["tracing"], env });
  return { relay, client: clients.tracing };
}

async function oneRun(config, tmp, sim, receiver, collector, tasks, tag) {
  const { relay, client } = await relayFor(
    config.dist,
    tmp,
    sim.url,
    tag,
    config.tracing ? tracingEnv(collector.url) : {},
  );
  try {
    receiver.reset();
    const cpu0 = cpuMsOf(relay.pid);
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < tasks) await create(relay, client.api_key, `${receiver.url}/hook`, next++);
      }),
    );
    const got = await receiver.waitFor(tasks);
    const cpu = cpuMsOf(relay.pid) - cpu0;
    if (got < tasks) throw new Error(`${tag}: ${got} of ${tasks} webhooks`);
    return { cpu_ms_per_task: round(cpu / tasks, 3) };
  } finally {
    await relay.stop();
  }
}

export async function benchTracing({
  rounds = QUICK ? 1 : Number(process.env.BENCH_ROUNDS ?? 3),
  log = console.log,
} = {}) {
  const tasks = QUICK ? 20 : Number(process.env.BENCH_TRACING_TASKS ?? 300);
  const oldDist =
    process.env.BENCH_TRACING_OLD_DIST ?? (existsSync("/work/base/dist/main.js") ? "/work/base/dist" : null);
  const configs = [
    { name: "new, tracing off", dist: DIST, tracing: false },
    ...(oldDist ? [{ name: "old, tracing off", dist: oldDist, tracing: false }] : []),
    { name: "new, tracing on", dist: DIST, tracing: true },
  ];
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-tracing-"));
  const sim = await startSimulator({ SIM_API_KEYS: "sandbox", ...FAST_SIMULATOR_ENV }, join(tmp, "sim.log"));
  const receiver = await sink();
  let spans = 0;
  const collector = await sink((body) => {
    spans += (body.toString().match(/"spanId"/g) ?? []).length;
  });
  const load_start = loadNow();
  const per = Object.fromEntries(configs.map((c) => [c.name, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const order = configs.map((_, i) => configs[(i + r) % configs.length]);
      for (const c of order) {
        const result = await oneRun(
          c,
          tmp,
          sim,
          receiver,
          collector,
          tasks,
          `r${r}-${c.dist === DIST ? "new" : "old"}-${c.tracing}`,
        );
        log(`  round ${r + 1} ${c.name}: ${JSON.stringify(result)}`);
        per[c.name].push(result.cpu_ms_per_task);
      }
    }
  } finally {
    await sim.stop();
    await receiver.close();
    await collector.close();
    rmSync(tmp, { recursive: true, force: true });
  }
  const rows = Object.fromEntries(
    configs.map((c) => [c.name, { cpu_ms_per_task: round(median(per[c.name]), 3), rounds: per[c.name] }]),
  );
  const off = rows["new, tracing off"].cpu_ms_per_task;
  return {
    method: `${tasks} tasks per relay per round (8 creations at a time) through the simulator (zero processing time) to a loopback receiver; relay CPU from /proc over creations..last webhook, per task; tracing on = OTLP/HTTP (http/json) to a loopback collector, always_on sampler; medians of ${rounds} round(s), order rotated`,
    load_start,
    rows,
    on_vs_off: round(rows["new, tracing on"].cpu_ms_per_task / off, 2),
    ...(rows["old, tracing off"]
      ? { new_off_vs_old_off: round(off / rows["old, tracing off"].cpu_ms_per_task, 2) }
      : {}),
    spans_exported: spans,
    load_end: loadNow(),
  };
}

/** One task with a caller's traceparent; its spans as an indented tree (name, kind, duration). */
async function sample() {
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-trace-sample-"));
  const sim = await startSimulator({ SIM_API_KEYS: "sandbox", ...FAST_SIMULATOR_ENV }, join(tmp, "sim.log"));
  const receiver = await sink((_body, req) => req.headers.traceparent);
  const collector = await sink((body) => JSON.parse(body.toString()));
  const { relay, client } = await relayFor(DIST, tmp, sim.url, "sample", tracingEnv(collector.url));
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  try {
    await create(relay, client.api_key, `${receiver.url}/hook`, 0, { traceparent });
    await receiver.waitFor(1);
  } finally {
    await relay.stop(); // SIGTERM flushes the batch of spans
  }
  const kinds = ["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"];
  const spans = collector.kept.flatMap((req) =>
    req.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)),
  );
  const byParent = new Map();
  for (const s of spans) byParent.set(s.parentSpanId ?? "", [...(byParent.get(s.parentSpanId ?? "") ?? []), s]);
  const attr = (s, key) => s.attributes?.find((a) => a.key === key)?.value;
  const lines = [`traceparent sent by the caller: ${traceparent}`, `traceparent the receiver got: ${receiver.kept[0]}`];
  const walk = (parent, depth) => {
    for (const s of (byParent.get(parent) ?? []).sort((a, b) =>
      Number(BigInt(a.startTimeUnixNano) - BigInt(b.startTimeUnixNano)),
    )) {
      const ms = Number(BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano)) / 1e6;
      const status = attr(s, "http.response.status_code");
      lines.push(
        `${"  ".repeat(depth)}${s.name} [${kinds[s.kind]}] trace=${s.traceId} span=${s.spanId} ${ms.toFixed(1)} ms${status ? ` status=${status.intValue ?? status.stringValue}` : ""}`,
      );
      walk(s.spanId, depth + 1);
    }
  };
  walk("00f067aa0ba902b7", 0);
  for (const s of spans.filter((x) => x.traceId !== "4bf92f3577b34da6a3ce929d0e0e4736")) {
    lines.push(`(another trace) ${s.name} [${kinds[s.kind]}] trace=${s.traceId}`);
  }
  await sim.stop();
  await receiver.close();
  await collector.close();
  rmSync(tmp, { recursive: true, force: true });
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (process.argv.includes("--sample")) console.log(await sample());
  else console.log(JSON.stringify(await benchTracing(), null, 2));
}

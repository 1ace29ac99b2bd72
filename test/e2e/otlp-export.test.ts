import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  DIST,
  sqliteSetup,
  startReceiver,
  startRelayProcess,
  startSqliteSimulator,
  until,
  type Child,
} from "./process.js";

/**
 * The built relay with the real OTLP/HTTP exporter, configured only by the standard OTEL_*
 * variables (docs/operations.md, "Tracing"; issue #42): a loopback collector reads the spans it was
 * sent, and a webhook receiver finds the caller's trace id and still verifies the signature. The
 * batch processor's delay is a minute, so the spans arrive only because SIGTERM flushes them.
 */
const built = existsSync(join(DIST, "main.js")) && existsSync(join(DIST, "simulator", "main.js"));

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
const SERVER = 2;
const CLIENT = 3;

interface Posted {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: Array<{ key: string; value: { stringValue?: string; intValue?: number | string } }>;
}

/** A loopback OTLP/HTTP collector: records every POST, answers 200 with an empty export response. */
async function startCollector() {
  const posts: Posted[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      posts.push({ path: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200, { "content-type": String(req.headers["content-type"] ?? "application/json") }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    posts,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function spansOf(posts: Posted[]): OtlpSpan[] {
  return posts.flatMap((p) => {
    const req = JSON.parse(p.body.toString("utf8")) as {
      resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
    };
    return req.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans));
  });
}

const attr = (s: OtlpSpan, key: string) => {
  const v = s.attributes?.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue === undefined ? undefined : Number(v.intValue));
};

describe.skipIf(!built)("OTLP/HTTP export from the built relay, configured by environment", () => {
  const children: Child[] = [];
  const cleanups: Array<() => Promise<void> | void> = [];
  // One simulator for the file: each test has its own database, client, relay, collector and receiver.
  let sim: Awaited<ReturnType<typeof startSqliteSimulator>>;
  beforeAll(async () => {
    sim = await startSqliteSimulator();
  });
  afterAll(async () => {
    await sim?.simulator.kill("SIGKILL");
  });
  afterEach(async () => {
    await Promise.all(children.splice(0).map((c) => c.kill("SIGKILL")));
    while (cleanups.length > 0) await cleanups.pop()!();
  });

  async function run(protocol: "http/json" | "http/protobuf") {
    const dir = mkdtempSync(join(tmpdir(), "genrelay-otlp-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const setup = await sqliteSetup(dir, "otlp", sim);
    const collector = await startCollector();
    cleanups.push(collector.close);
    const receiver = await startReceiver();
    cleanups.push(receiver.close);
    const { child, url } = await startRelayProcess({
      ...setup.relayEnv,
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
      // Nothing is exported on a timer during the test: what arrives is what shutdown flushed.
      OTEL_BSP_SCHEDULE_DELAY: "60000",
      OTEL_NODE_RESOURCE_DETECTORS: "none",
    });
    children.push(child);
    const res = await fetch(`${url}/openapi/v1/images/generations`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${setup.apiKey}`,
        "Content-Type": "application/json",
        "Idempotency-Key": `otlp-${protocol.replace("/", "-")}`,
        traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01`,
      },
      body: JSON.stringify({
        model: "p-image",
        mode: "generate",
        prompt: "a traced fox",
        count: 1,
        callback_url: receiver.url,
      }),
    });
    const created = (await res.json()) as { data: { id: string } };
    expect(res.status, JSON.stringify(created)).toBe(201);
    const id = created.data.id;
    await until(
      () => receiver.hooks.length >= 1,
      receiver.onHook,
      30_000,
      () => "no webhook",
    );
    expect(collector.posts).toEqual([]);
    expect(await child.kill("SIGTERM")).toBe(0);
    return { setup, collector, hook: receiver.hooks[0]!, id, callbackUrl: receiver.url };
  }

  it("http/json: one trace from the SERVER span through the upstream CLIENT spans to the attempt; the receiver verifies", async () => {
    const { setup, collector, hook, id, callbackUrl } = await run("http/json");
    expect(collector.posts.map((p) => [p.path, p.headers["content-type"]])).toEqual(
      collector.posts.map(() => ["/v1/traces", "application/json"]),
    );
    const spans = spansOf(collector.posts);
    const server = spans.find((s) => s.kind === SERVER && s.name === "POST /openapi/v1/images/generations")!;
    expect(server).toBeDefined();
    expect({ traceId: server.traceId, parent: server.parentSpanId }).toEqual({
      traceId: TRACE_ID,
      parent: CALLER_SPAN,
    });
    const clients = spans.filter((s) => s.kind === CLIENT);
    const submit = clients.find((s) => s.name === "POST /openapi/v1/images/generations")!;
    const reads = clients.filter((s) => s.name === "GET /openapi/v1/tasks/{id}");
    const attempt = clients.find((s) => s.name === "POST")!;
    expect(submit).toBeDefined();
    expect(reads.length).toBeGreaterThanOrEqual(1);
    expect(attempt).toBeDefined();
    for (const s of [submit, ...reads, attempt]) {
      expect({ name: s.name, traceId: s.traceId, parent: s.parentSpanId }).toEqual({
        name: s.name,
        traceId: TRACE_ID,
        parent: server.spanId,
      });
    }
    expect(attr(attempt, "url.full")).toBe(callbackUrl);
    expect(attr(attempt, "http.response.status_code")).toBe(200);
    // The receiver got the attempt's own span as its parent, and the signature still verifies.
    expect(hook.headers.traceparent).toBe(`00-${TRACE_ID}-${attempt.spanId}-01`);
    const event = new Webhook(setup.secret).verify(hook.body, {
      "webhook-id": String(hook.headers["webhook-id"]),
      "webhook-timestamp": String(hook.headers["webhook-timestamp"]),
      "webhook-signature": String(hook.headers["webhook-signature"]),
    }) as { type: string; data: { id: string } };
    expect(event).toMatchObject({ type: "task.succeeded", data: { id } });
  }, 60_000);

  it("http/protobuf (the SDK's default): the spans are posted as protobuf carrying the caller's trace id", async () => {
    const { collector, hook } = await run("http/protobuf");
    expect(collector.posts.length).toBeGreaterThanOrEqual(1);
    for (const p of collector.posts) {
      expect([p.path, p.headers["content-type"]]).toEqual(["/v1/traces", "application/x-protobuf"]);
    }
    // Trace ids are raw 16-byte fields in OTLP protobuf; the receiver's traceparent names one of the exported spans.
    const body = Buffer.concat(collector.posts.map((p) => p.body));
    expect(body.includes(Buffer.from(TRACE_ID, "hex"))).toBe(true);
    const attemptSpan = /^00-[0-9a-f]{32}-([0-9a-f]{16})-01$/.exec(String(hook.headers.traceparent))![1]!;
    expect(body.includes(Buffer.from(attemptSpan, "hex"))).toBe(true);
  }, 60_000);
});

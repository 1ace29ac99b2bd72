import { SpanKind } from "@opentelemetry/api";
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/logger.js";
import { noTelemetry, type Telemetry, useTelemetry } from "../../src/telemetry/index.js";
import { sdkTelemetry } from "../../src/telemetry/otel.js";
import { UpstreamClient } from "../../src/upstream/client.js";
import { createTask, runNextRetry, runToWebhook, taskRow } from "../helpers/flow.js";
import { capturedLogger } from "../helpers/log-lines.js";
import { ok, status, verifyAt } from "../helpers/receiver.js";
import { UPSTREAM_KEY, UPSTREAM_URL, viaGlobalFetch } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Tracing on, with the OpenTelemetry SDK and an in-memory exporter (docs/contract.md, "Trace context"; issue
 * #42): one trace from the caller's creation through the upstream calls to every webhook attempt,
 * the span tree and the semantic-convention attributes.
 */
const { setup, receiver } = upstreamSuite();
const exporter = new InMemorySpanExporter();
let tracing: Telemetry;
beforeAll(() => {
  tracing = sdkTelemetry({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  useTelemetry(tracing);
});
afterAll(async () => {
  useTelemetry(noTelemetry);
  await tracing.shutdown();
});
afterEach(() => exporter.reset());

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";

const spans = () => exporter.getFinishedSpans();
const named = (kind: SpanKind, name: string) => spans().filter((s) => s.kind === kind && s.name === name);
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const traceparentOf = (s: ReadableSpan) => `00-${s.spanContext().traceId}-${s.spanContext().spanId}-01`;

describe("tracing on: spans", () => {
  it("one trace from the caller's creation through submission and read to each webhook attempt", async () => {
    const { t, up } = setup();
    const r = await receiver();
    r.answers.push(status(500), status(503), ok);
    const client = t.client();
    const res = await t.request(client.apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: {
        model: "p-image",
        mode: "generate",
        prompt: "a red fox in snow",
        count: 1,
        callback_url: r.url("/hook?token=s3cret"),
      },
      idempotencyKey: "trace-key-0001",
      headers: { traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01`, tracestate: "rojo=00f067aa0ba902b7" },
    });
    expect(res.status).toBe(201);
    const id = ((await res.json()) as { data: { id: string } }).data.id;
    await runToWebhook(t, up, id);
    // Two retries (500, then 503, then 200), one turn each at its jittered due time.
    for (let i = 0; i < 2; i++) await runNextRetry(t);

    const [server] = named(SpanKind.SERVER, "POST /openapi/v1/images/generations");
    expect(server).toBeDefined();
    expect(server!.spanContext().traceId).toBe(TRACE_ID);
    expect(parentOf(server!)).toBe(CALLER_SPAN);
    expect(server!.attributes).toMatchObject({
      "http.request.method": "POST",
      "http.route": "/openapi/v1/images/generations",
      "http.response.status_code": 201,
    });
    // The task keeps the creation's span: everything later is its child.
    expect(taskRow(t, id).traceparent).toBe(traceparentOf(server!));
    expect(taskRow(t, id).tracestate).toBe("rojo=00f067aa0ba902b7");

    const [submit] = named(SpanKind.CLIENT, "POST /openapi/v1/images/generations");
    const [read] = named(SpanKind.CLIENT, "GET /openapi/v1/tasks/{id}");
    const upstreamHost = new URL(UPSTREAM_URL).hostname;
    for (const call of [submit, read]) {
      expect(call).toBeDefined();
      expect(call!.spanContext().traceId).toBe(TRACE_ID);
      expect(parentOf(call!)).toBe(server!.spanContext().spanId);
      expect(call!.attributes["server.address"]).toBe(upstreamHost);
    }
    expect(submit!.attributes).toMatchObject({ "http.request.method": "POST", "http.response.status_code": 201 });
    expect(read!.attributes).toMatchObject({
      "http.request.method": "GET",
      "http.response.status_code": 200,
      "url.full": `${UPSTREAM_URL}/openapi/v1/tasks/${up.taskOf(id)!.id}`,
    });

    const attempts = named(SpanKind.CLIENT, "POST").sort((a, b) => a.startTime[1] - b.startTime[1]);
    expect(attempts).toHaveLength(3);
    expect(r.requests).toHaveLength(3);
    for (const attempt of attempts) {
      expect(attempt.spanContext().traceId).toBe(TRACE_ID);
      expect(parentOf(attempt)).toBe(server!.spanContext().spanId);
    }
    // Each attempt's header is its own span's context (matched by span id, whatever order they ended in).
    expect(r.requests.map((q) => q.headers.traceparent).sort()).toEqual(attempts.map(traceparentOf).sort());
    const byResend = new Map(attempts.map((a) => [a.attributes["http.request.resend_count"] ?? 0, a]));
    const port = Number(new URL(r.url()).port);
    expect(byResend.get(0)!.attributes).toEqual({
      "http.request.method": "POST",
      "url.full": r.url("/hook"),
      "server.address": "127.0.0.1",
      "server.port": port,
      "http.response.status_code": 500,
      "error.type": "500",
    });
    expect(byResend.get(1)!.attributes).toMatchObject({ "http.response.status_code": 503, "error.type": "503" });
    expect(byResend.get(2)!.attributes).toMatchObject({ "http.response.status_code": 200 });
    expect(byResend.get(2)!.attributes["error.type"]).toBeUndefined();
    for (const q of r.requests) expect(verifyAt(client.secret, q, t.clock.now())).toMatchObject({ data: { id } });
  });

  it("without a caller's traceparent the relay starts the trace at intake", async () => {
    const { t, up } = setup();
    const r = await receiver();
    const client = t.client();
    const id = await createTask(t, client.apiKey, { callback_url: r.url() });
    await runToWebhook(t, up, id);
    const [server] = named(SpanKind.SERVER, "POST /openapi/v1/images/generations");
    expect(server!.parentSpanContext).toBeUndefined();
    const traceId = server!.spanContext().traceId;
    expect(taskRow(t, id).traceparent).toBe(traceparentOf(server!));
    const [attempt] = named(SpanKind.CLIENT, "POST");
    expect(r.requests[0]!.headers.traceparent).toBe(traceparentOf(attempt!));
    expect(attempt!.spanContext().traceId).toBe(traceId);
  });

  it("an invalid traceparent is ignored: the request starts a new trace", async () => {
    const { t } = setup();
    const client = t.client();
    const res = await t.request(client.apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      json: { model: "p-image", mode: "generate", prompt: "a red fox in snow", count: 1 },
      idempotencyKey: "trace-key-0002",
      headers: { traceparent: `00-${TRACE_ID}-0000000000000000-01` },
    });
    expect(res.status).toBe(201);
    const [server] = named(SpanKind.SERVER, "POST /openapi/v1/images/generations");
    expect(server!.parentSpanContext).toBeUndefined();
    expect(server!.spanContext().traceId).not.toBe(TRACE_ID);
  });

  it("a list read links the trace of each task it reports", async () => {
    const { up } = setup();
    up.seed({ id: "up-1", key: "k-1", type: "image", status: "processing" });
    up.seed({ id: "up-2", key: "k-2", type: "image", status: "processing" });
    const contexts = new Map([["up-1", { traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01`, tracestate: null }]]);
    const upstream = new UpstreamClient({ baseUrl: UPSTREAM_URL, apiKey: UPSTREAM_KEY, fetch: viaGlobalFetch });
    const page = await upstream.listTasks({ status: "processing" }, (upId) => contexts.get(upId) ?? null);
    expect(page?.tasks.map((x) => x.id).sort()).toEqual(["up-1", "up-2"]);
    const [list] = named(SpanKind.CLIENT, "GET /openapi/v1/tasks");
    expect(list!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[TRACE_ID, CALLER_SPAN]]);
    // Made for no one task: its own trace, not a task's.
    expect(list!.spanContext().traceId).not.toBe(TRACE_ID);
    expect(list!.attributes["url.full"]).toBe(`${UPSTREAM_URL}/openapi/v1/tasks`);
  });

  it("log lines written under a span carry its trace_id and span_id", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    });
    const logger = createLogger("info", sink);
    logger.info("outside");
    let ids: Record<string, string> = {};
    await tracing.outgoing({ name: "op", kind: "client", parent: null, attributes: () => ({}) }, async () => {
      ids = tracing.logFields();
      logger.info("inside");
    });
    expect(ids.trace_id).toMatch(/^[0-9a-f]{32}$/);
    expect(lines.map((l) => [l.msg, l.trace_id, l.span_id])).toEqual([
      ["outside", undefined, undefined],
      ["inside", ids.trace_id, ids.span_id],
    ]);
  });

  it("a webhook attempt's log line names the attempt's own CLIENT span", async () => {
    const { logger, lines } = capturedLogger();
    const { t, up } = setup({}, { logger });
    const r = await receiver();
    const id = await createTask(t, t.client().apiKey, { callback_url: r.url() });
    await runToWebhook(t, up, id);
    const [attempt] = named(SpanKind.CLIENT, "POST");
    const [line] = lines.filter((l) => l.msg === "webhook attempt");
    expect({ trace_id: line!.trace_id, span_id: line!.span_id }).toEqual({
      trace_id: attempt!.spanContext().traceId,
      span_id: attempt!.spanContext().spanId,
    });
  });
});

import { describe, expect, it } from "vitest";
import { createTask, runNextRetry, runToWebhook, taskRow } from "../helpers/flow.js";
import { capturedLogger } from "../helpers/log-lines.js";
import { status, verifyAt } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * W3C trace context from the caller to the receiver with tracing off (docs/contract.md, "Trace context"; issue
 * #42): a creation's `traceparent` is kept with the task, and every upstream call and delivery
 * attempt made for the task carries the same trace id under its own span id, with the `tracestate`.
 */
const { setup, receiver, server } = upstreamSuite();

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
const TRACEPARENT = `00-${TRACE_ID}-${CALLER_SPAN}-01`;
const TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
const CHILD = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

/** The trace headers of every request the (msw) upstream received, in order. */
function upstreamTraces(): Array<{ path: string; traceparent: string | null; tracestate: string | null }> {
  const seen: Array<{ path: string; traceparent: string | null; tracestate: string | null }> = [];
  server.events.on("request:start", ({ request }) => {
    seen.push({
      path: `${request.method} ${new URL(request.url).pathname}`,
      traceparent: request.headers.get("traceparent"),
      tracestate: request.headers.get("tracestate"),
    });
  });
  return seen;
}

async function createTraced(
  t: TestRelay,
  apiKey: string,
  body: Record<string, unknown>,
  headers: Record<string, string>,
) {
  const res = await t.request(apiKey, "/openapi/v1/images/generations", {
    method: "POST",
    json: { model: "p-image", mode: "generate", prompt: "a red fox in snow", count: 1, ...body },
    idempotencyKey: `key-${crypto.randomUUID()}`,
    headers,
  });
  const json = (await res.json()) as { data: { id: string } };
  expect(res.status, JSON.stringify(json)).toBe(201);
  return json.data.id;
}

describe("trace context, tracing off", () => {
  it("carries the caller's trace id to the upstream and the receiver, a span id per call, signature intact", async () => {
    const { t, up } = setup();
    const seen = upstreamTraces();
    const r = await receiver();
    const client = t.client();
    const id = await createTraced(
      t,
      client.apiKey,
      { callback_url: r.url() },
      { traceparent: TRACEPARENT, tracestate: TRACESTATE },
    );
    expect({ traceparent: taskRow(t, id).traceparent, tracestate: taskRow(t, id).tracestate }).toEqual({
      traceparent: TRACEPARENT,
      tracestate: TRACESTATE,
    });

    await runToWebhook(t, up, id);

    expect(seen.map((s) => s.path)).toEqual([
      "POST /openapi/v1/images/generations",
      `GET /openapi/v1/tasks/${up.taskOf(id)!.id}`,
    ]);
    const spans: string[] = [];
    for (const call of seen) {
      const [, traceId, spanId] = CHILD.exec(call.traceparent ?? "") ?? [];
      expect(traceId, call.path).toBe(TRACE_ID);
      expect(call.tracestate).toBe(TRACESTATE);
      spans.push(spanId!);
    }

    expect(r.requests).toHaveLength(1);
    const hook = r.requests[0]!;
    const [, hookTrace, hookSpan] = CHILD.exec(hook.headers.traceparent ?? "") ?? [];
    expect(hookTrace).toBe(TRACE_ID);
    expect(hook.headers.tracestate).toBe(TRACESTATE);
    spans.push(hookSpan!);
    // Every call its own span: none reuses the caller's span id or another call's.
    expect(new Set([...spans, CALLER_SPAN]).size).toBe(spans.length + 1);
    // The header is outside the signed content: a Standard Webhooks library still verifies.
    expect(verifyAt(client.secret, hook, t.clock.now())).toMatchObject({ type: "task.succeeded", data: { id } });

    // A redelivery keeps the trace, under a new span id.
    const again = await t.request(client.apiKey, `/openapi/v1/tasks/${id}/redeliver`, { method: "POST" });
    expect(again.status).toBe(202);
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(2);
    const [, redeliveredTrace, redeliveredSpan] = CHILD.exec(r.requests[1]!.headers.traceparent ?? "") ?? [];
    expect(redeliveredTrace).toBe(TRACE_ID);
    expect(redeliveredSpan).not.toBe(hookSpan);
    expect(r.requests[1]!.headers["webhook-id"]).toBe(hook.headers["webhook-id"]);
    expect(verifyAt(client.secret, r.requests[1]!, t.clock.now())).toMatchObject({ type: "task.succeeded" });
  });

  it("every retry of an attempt carries the trace, each under its own span id", async () => {
    const { t, up } = setup();
    const r = await receiver();
    r.answers.push(status(500), status(503));
    const client = t.client();
    const id = await createTraced(t, client.apiKey, { callback_url: r.url() }, { traceparent: TRACEPARENT });
    await runToWebhook(t, up, id);
    for (let i = 0; i < 2; i++) await runNextRetry(t);
    expect(r.requests.map((q) => q.headers["webhook-id"] !== undefined)).toEqual([true, true, true]);
    const parsed = r.requests.map((q) => CHILD.exec(q.headers.traceparent ?? "")?.slice(1, 3));
    expect(parsed.map((p) => p?.[0])).toEqual([TRACE_ID, TRACE_ID, TRACE_ID]);
    expect(new Set(parsed.map((p) => p?.[1])).size).toBe(3);
    // No tracestate was given: none is made up.
    expect(r.requests.map((q) => q.headers.tracestate)).toEqual([undefined, undefined, undefined]);
  });

  it.each([
    ["not a traceparent"],
    ["00-00000000000000000000000000000000-00f067aa0ba902b7-01"],
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"],
    ["ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    ["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"],
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"],
  ])("an invalid traceparent (%s) is ignored, without error", async (traceparent) => {
    const { t, up } = setup();
    const seen = upstreamTraces();
    const r = await receiver();
    const client = t.client();
    const id = await createTraced(t, client.apiKey, { callback_url: r.url() }, { traceparent, tracestate: TRACESTATE });
    expect(taskRow(t, id).traceparent).toBeNull();
    expect(taskRow(t, id).tracestate).toBeNull();
    await runToWebhook(t, up, id);
    expect(seen.map((s) => [s.traceparent, s.tracestate])).toEqual([
      [null, null],
      [null, null],
    ]);
    expect(r.requests[0]!.headers.traceparent).toBeUndefined();
    expect(r.requests[0]!.headers.tracestate).toBeUndefined();
  });

  it("a task created without a traceparent sends none (tracing off starts no trace)", async () => {
    const { t, up } = setup();
    const r = await receiver();
    const client = t.client();
    const id = await createTask(t, client.apiKey, { callback_url: r.url() });
    await runToWebhook(t, up, id);
    expect(r.requests[0]!.headers.traceparent).toBeUndefined();
  });

  it("each attempt's log line names the trace id and span id of the traceparent it carried", async () => {
    const { logger, lines } = capturedLogger();
    const { t, up } = setup({}, { logger });
    const r = await receiver();
    r.answers.push(status(500));
    const client = t.client();
    const id = await createTraced(t, client.apiKey, { callback_url: r.url() }, { traceparent: TRACEPARENT });
    await runToWebhook(t, up, id);
    await runNextRetry(t);
    expect(r.requests).toHaveLength(2);
    const sent = r.requests.map((q) => CHILD.exec(q.headers.traceparent ?? "")!.slice(1, 3));
    const attempts = lines.filter((l) => l.msg === "webhook attempt");
    expect(attempts.map((l) => [l.attempt, l.status_code, l.trace_id, l.span_id])).toEqual([
      [1, 500, TRACE_ID, sent[0]![1]],
      [2, 200, TRACE_ID, sent[1]![1]],
    ]);
  });

  it("an attempt of a task without a trace logs no trace ids", async () => {
    const { logger, lines } = capturedLogger();
    const { t, up } = setup({}, { logger });
    const r = await receiver();
    const id = await createTask(t, t.client().apiKey, { callback_url: r.url() });
    await runToWebhook(t, up, id);
    const [attempt] = lines.filter((l) => l.msg === "webhook attempt");
    expect(attempt).toMatchObject({ task_id: id, attempt: 1, status_code: 200 });
    expect(Object.keys(attempt!).filter((k) => k.startsWith("trace") || k === "span_id")).toEqual([]);
  });
});

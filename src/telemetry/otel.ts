import {
  context,
  createTraceState,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type SpanContext,
  trace,
} from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { SpanProcessor } from "@opentelemetry/sdk-trace-base";
import { ATTR } from "./attributes.js";
import type { CallSpan, Telemetry } from "./index.js";
import { parseTraceparent, type TraceContext, type TraceHeaders, traceContextOf } from "./trace-context.js";

/**
 * Tracing on: the official OpenTelemetry SDK (NodeSDK), configured by the standard OTEL_* variables
 * (exporter, endpoint, protocol, sampler, service name: the SDK reads them itself). Loaded only by
 * `startTelemetry` (index.ts), never when tracing is off.
 */
export interface SdkOptions {
  /** Replaces the exporter chosen by OTEL_TRACES_EXPORTER (tests: an in-memory exporter). */
  spanProcessors?: SpanProcessor[];
}

const TRACER = "genrelay";

export function sdkTelemetry(opts: SdkOptions = {}): Telemetry {
  const sdk = new NodeSDK({
    // The service's name unless OTEL_SERVICE_NAME (read by the SDK's env detector, which wins) says another.
    resource: resourceFromAttributes({ "service.name": "genrelay" }),
    ...(opts.spanProcessors ? { spanProcessors: opts.spanProcessors } : {}),
    // Traces only: the relay's metrics are Prometheus (GET /metrics) and its logs pino's lines.
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  const tracer = trace.getTracer(TRACER);

  return {
    on: true,

    incoming: (spec, handle) => {
      const carrier: Record<string, string> = {};
      if (spec.traceparent) carrier.traceparent = spec.traceparent;
      if (spec.tracestate) carrier.tracestate = spec.tracestate;
      // An invalid traceparent is ignored by the W3C propagator: the request starts a new trace.
      const parent = propagation.extract(ROOT_CONTEXT, carrier);
      const span = tracer.startSpan(spec.name, { kind: SpanKind.SERVER, attributes: spec.attributes }, parent);
      return context.with(trace.setSpan(parent, span), () => finish(span, handle(callSpan(span))));
    },

    intakeContext: (headers) => {
      const span = trace.getSpan(context.active());
      // Outside a request (a benchmark calling intake directly) the caller's header is all there is.
      if (!span) return traceContextOf(headers.traceparent, headers.tracestate);
      const sc = span.spanContext();
      return { traceparent: traceparentOf(sc), tracestate: sc.traceState?.serialize() || null };
    },

    outgoing: (spec, call) => {
      const parent = spec.parent ? remoteContext(spec.parent) : context.active();
      const kind = spec.kind === "producer" ? SpanKind.PRODUCER : SpanKind.CLIENT;
      const span = tracer.startSpan(spec.name, { kind, attributes: spec.attributes() }, parent);
      const sc = span.spanContext();
      const headers: TraceHeaders = { traceparent: traceparentOf(sc) };
      const state = sc.traceState?.serialize();
      if (state) headers.tracestate = state;
      return context.with(trace.setSpan(parent, span), () => finish(span, call(headers, callSpan(span))));
    },

    logFields: (): Record<string, string> => {
      const span = trace.getSpan(context.active());
      if (!span) return {};
      const sc = span.spanContext();
      return { trace_id: sc.traceId, span_id: sc.spanId };
    },

    shutdown: async () => {
      await sdk.shutdown();
      // The API's globals go too, so a process (or a test file) can start the SDK again.
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

/** A stored trace context as the parent of a span: the task's trace continued by a later call. */
function remoteContext(stored: TraceContext) {
  const parsed = parseTraceparent(stored.traceparent);
  if (!parsed) return ROOT_CONTEXT;
  const sc: SpanContext = {
    traceId: parsed.traceId,
    spanId: parsed.spanId,
    traceFlags: Number.parseInt(parsed.flags, 16),
    isRemote: true,
  };
  if (stored.tracestate) sc.traceState = createTraceState(stored.tracestate);
  return trace.setSpanContext(ROOT_CONTEXT, sc);
}

function traceparentOf(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags.toString(16).padStart(2, "0")}`;
}

function callSpan(span: Span): CallSpan {
  return {
    rename: (name) => span.updateName(name),
    setAttributes: (attributes) => {
      for (const [key, value] of Object.entries(attributes)) if (value !== undefined) span.setAttribute(key, value);
    },
    fail: (errorType, message) => {
      span.setAttribute(ATTR.errorType, errorType);
      span.setStatus(message === undefined ? { code: SpanStatusCode.ERROR } : { code: SpanStatusCode.ERROR, message });
    },
    link: (contexts) => {
      const links = [];
      for (const c of contexts) {
        const parsed = parseTraceparent(c.traceparent);
        if (parsed)
          links.push({
            context: { traceId: parsed.traceId, spanId: parsed.spanId, traceFlags: Number.parseInt(parsed.flags, 16) },
          });
      }
      if (links.length > 0) span.addLinks(links);
    },
  };
}

/** Ends the span when the work settles; a throw is recorded (`error.type` its name) and passed on. */
async function finish<T>(span: Span, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    const error = err instanceof Error ? err : new Error(String(err));
    span.recordException(error);
    span.setAttribute(ATTR.errorType, (error as { code?: unknown }).code?.toString() ?? error.name);
    span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
    throw err;
  } finally {
    span.end();
  }
}

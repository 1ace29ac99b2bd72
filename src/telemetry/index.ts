import { childHeaders, traceContextOf, type TraceContext, type TraceHeaders } from "./trace-context.js";

/**
 * Tracing as the rest of the relay sees it (docs/operations.md, "Tracing"). Off by default: then
 * `noTelemetry` answers every call with plain code (the task's own trace headers passed on with a
 * fresh span id) and the OpenTelemetry SDK is never loaded. On (config.ts, `tracingEnabled`), main
 * loads `./otel.js` and installs it here before anything is served.
 */
export interface Telemetry {
  readonly on: boolean;
  /**
   * Runs one API request as a SERVER span, a child of the request's `traceparent` when it carries a
   * valid one; the span is active while `handle` runs (intake keeps it, log lines carry its ids).
   */
  incoming(spec: IncomingSpec, handle: (span: CallSpan) => Promise<void>): Promise<void>;
  /**
   * The trace context a new task keeps: the creation's SERVER span when tracing is on (a child of
   * the caller's `traceparent`, or a trace the relay starts), else the caller's valid header, else null.
   */
  intakeContext(headers: { traceparent?: string | undefined; tracestate?: string | undefined }): TraceContext | null;
  /**
   * Runs one outgoing call as a CLIENT (or PRODUCER) span under its task's trace; `call` gets the
   * headers to send (the task's trace id, this call's span id) and the span to describe the outcome on.
   */
  outgoing<T>(spec: OutgoingSpec, call: (headers: TraceHeaders, span: CallSpan) => Promise<T>): Promise<T>;
  /** `trace_id`/`span_id` of the active span, for log lines; empty when none. */
  logFields(): Record<string, string>;
  /** Sends what is still buffered; called at shutdown. */
  shutdown(): Promise<void>;
}

export interface IncomingSpec {
  name: string;
  traceparent?: string | undefined;
  tracestate?: string | undefined;
  attributes: Record<string, string | number>;
}

export interface OutgoingSpec {
  name: string;
  /** `client` for HTTP calls, `producer` for a queue publish. */
  kind: "client" | "producer";
  /** The task's trace (the span's parent); null for calls made for no task. */
  parent: TraceContext | null;
  /**
   * The span's attributes known before the call, built only when a span is made: with tracing off
   * no one reads them, and they cost URL parses on every upstream read and delivery attempt.
   */
  attributes: () => Record<string, string | number>;
}

/** What a call says about itself once it knows (semantic-convention attributes, links to other tasks' traces). */
export interface CallSpan {
  /** A name known only once the call is done (a request's matched route). */
  rename(name: string): void;
  setAttributes(attributes: Record<string, string | number | undefined>): void;
  /** The call's failure class (`error.type`): an HTTP status as text, `timeout`, or the error's kind; marks the span an error. */
  fail(errorType: string, message?: string): void;
  /** Links each task a list read reported (its stored trace). */
  link(contexts: readonly TraceContext[]): void;
}

const NO_SPAN: CallSpan = {
  rename: () => undefined,
  setAttributes: () => undefined,
  fail: () => undefined,
  link: () => undefined,
};

/** Tracing off: no spans, the task's trace passed on with each call's own span id. */
export const noTelemetry: Telemetry = {
  on: false,
  incoming: (_spec, handle) => handle(NO_SPAN),
  intakeContext: (headers) => traceContextOf(headers.traceparent, headers.tracestate),
  outgoing: (spec, call) => call(childHeaders(spec.parent), NO_SPAN),
  // A fresh object each time: pino merges the call's own fields into the mixin's (Object.assign),
  // so a shared frozen one throws on the first log line with fields.
  logFields: () => ({}),
  shutdown: async () => undefined,
};

let current: Telemetry = noTelemetry;

/** The process's telemetry (one per process, as OpenTelemetry's own global provider is). */
export function telemetry(): Telemetry {
  return current;
}

/** Installs the process's telemetry (main at start; tests with an in-memory exporter); returns the one it replaced. */
export function useTelemetry(next: Telemetry): Telemetry {
  const previous = current;
  current = next;
  return previous;
}

/** A stored task's or event's trace columns as a context, or null. */
export function storedContext(row: { traceparent?: string | null; tracestate?: string | null }): TraceContext | null {
  return row.traceparent ? { traceparent: row.traceparent, tracestate: row.tracestate ?? null } : null;
}

/**
 * Starts the OpenTelemetry SDK, configured by the standard OTEL_* variables, and installs it. The
 * SDK is imported here and only here, so a relay with tracing off never loads it.
 */
export async function startTelemetry(): Promise<Telemetry> {
  const { sdkTelemetry } = await import("./otel.js");
  const started = sdkTelemetry();
  useTelemetry(started);
  return started;
}

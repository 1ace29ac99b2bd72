import { pooledRandomBytes } from "../ids.js";

/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/), the parts the relay handles without the
 * OpenTelemetry SDK: a caller's header checked at intake, and an attempt's own header made from the
 * task's when tracing is off (a new span id under the same trace, so the receiver still sees the
 * caller's trace id).
 */

/** The trace context a task carries: what intake stored, sent on with every call made for the task. */
export interface TraceContext {
  traceparent: string;
  tracestate: string | null;
}

/** The headers one outgoing call carries; empty when its task has no trace. */
export interface TraceHeaders {
  traceparent?: string;
  tracestate?: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);
/** The spec's limit: 32 list members of at most 256 characters each, and at most 512 characters kept. */
const TRACESTATE_MAX = 512;
const TRACESTATE_MEMBER =
  /^(?:[a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;

export interface ParsedTraceparent {
  traceId: string;
  spanId: string;
  flags: string;
}

/**
 * A traceparent the relay can continue, or null: version `ff`, all-zero ids, upper-case hex and
 * version 00 with trailing data are invalid by the spec; a later version's extra fields are allowed.
 */
export function parseTraceparent(value: string | null | undefined): ParsedTraceparent | null {
  if (!value) return null;
  const m = TRACEPARENT.exec(value.trim());
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === "ff" || (version === "00" && rest !== undefined)) return null;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return null;
  return { traceId: traceId!, spanId: spanId!, flags: flags! };
}

/** The caller's tracestate when every member is well-formed and it fits 512 characters, else null (dropped, as the spec allows). */
export function parseTracestate(value: string | null | undefined): string | null {
  if (!value) return null;
  const members = value
    .split(",")
    .map((m) => m.trim())
    .filter((m) => m !== "");
  if (members.length === 0 || members.length > 32) return null;
  if (!members.every((m) => TRACESTATE_MEMBER.test(m))) return null;
  const joined = members.join(",");
  return joined.length <= TRACESTATE_MAX ? joined : null;
}

/** A creation's trace headers as a task's context, or null when its traceparent is missing or invalid (then ignored, never refused). */
export function traceContextOf(traceparent: string | null | undefined, tracestate: string | null | undefined) {
  const parsed = parseTraceparent(traceparent);
  if (!parsed) return null;
  return { traceparent: formatTraceparent(parsed), tracestate: parseTracestate(tracestate) } satisfies TraceContext;
}

export function formatTraceparent(p: ParsedTraceparent): string {
  return `00-${p.traceId}-${p.spanId}-${p.flags}`;
}

export function randomSpanId(): string {
  // A span id per delivery attempt: drawn from the ids' pool, not a CSPRNG call each (7 µs a webhook).
  let id = pooledRandomBytes(8).toString("hex");
  while (id === ZERO_SPAN) id = pooledRandomBytes(8).toString("hex");
  return id;
}

/** The headers of one call made for a task: its trace, the call's own span id. */
export function childHeaders(parent: TraceContext | null | undefined, spanId = randomSpanId()): TraceHeaders {
  const parsed = parent ? parseTraceparent(parent.traceparent) : null;
  if (!parsed) return {};
  const headers: TraceHeaders = { traceparent: formatTraceparent({ ...parsed, spanId }) };
  if (parent!.tracestate) headers.tracestate = parent!.tracestate;
  return headers;
}

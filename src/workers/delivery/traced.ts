import { WEBHOOK_KIND } from "../../destinations/http.js";
import type { DeliveryOutcome, Destinations, DestinationMessage, SendDeadline } from "../../destinations/index.js";
import { ATTR, httpClientAttributes } from "../../telemetry/attributes.js";
import { telemetry } from "../../telemetry/index.js";
import type { TraceContext } from "../../telemetry/trace-context.js";
import { parseTraceparent } from "../../telemetry/trace-context.js";

/** An attempt's outcome and the trace ids it went out under (`{}` when its task has no trace). */
export interface TracedOutcome {
  outcome: DeliveryOutcome;
  /** `trace_id`/`span_id` of the attempt's `traceparent`: its log line names them, tracing on or off. */
  ids: { trace_id?: string; span_id?: string };
}

/** The ids of an attempt sent without a trace: none, one object for all of them (read, never changed). */
const NO_IDS: TracedOutcome["ids"] = Object.freeze({});

/**
 * One attempt through the destination port under its task's trace (docs/operations.md, "Tracing"):
 * the message carries a `traceparent` of the task's trace id and this attempt's own span id, outside
 * the signed content; with tracing on the attempt is a CLIENT span (a `webhook`) or a PRODUCER span
 * (a queue kind's publish). Around the port, so every kind gets both without doing anything.
 */
export function tracedSend(
  destinations: Pick<Destinations, "send">,
  message: DestinationMessage,
  deadline: SendDeadline,
  attempt: { trace: TraceContext | null; resendCount: number },
): Promise<TracedOutcome> {
  const tracing = telemetry();
  // Tracing off and a task without a trace (most): nothing to carry nor record, so no headers,
  // span id or closure per attempt; the message goes as it is.
  if (!tracing.on && attempt.trace === null) return destinations.send(message, deadline).then(untraced);
  const http = message.target.kind === WEBHOOK_KIND;
  return tracing.outgoing(
    {
      name: http ? "POST" : `publish ${message.type}`,
      kind: http ? "client" : "producer",
      parent: attempt.trace,
      attributes: () => spanAttributes(message, http, attempt.resendCount),
    },
    async (headers, span) => {
      // A task without a trace (most) sends the message as it is: no copy of it per attempt.
      const traced = headers.traceparent !== undefined || headers.tracestate !== undefined;
      const outcome = await destinations.send(traced ? { ...message, ...headers } : message, deadline);
      if (tracing.on) {
        span.setAttributes({ [ATTR.httpResponseStatusCode]: outcome.statusCode ?? undefined });
        if (!outcome.ok) span.fail(errorType(outcome), outcome.error ?? undefined);
      }
      const sent = traced ? parseTraceparent(headers.traceparent) : null;
      return { outcome, ids: sent ? { trace_id: sent.traceId, span_id: sent.spanId } : NO_IDS };
    },
  );
}

/** The attempt span's attributes known before it is sent (semantic conventions for HTTP clients or messaging producers). */
function spanAttributes(
  message: DestinationMessage,
  http: boolean,
  resendCount: number,
): Record<string, string | number> {
  return {
    ...(http
      ? httpClientAttributes("POST", message.target.address)
      : {
          [ATTR.messagingSystem]: message.target.kind,
          [ATTR.messagingOperationType]: "send",
          [ATTR.messagingMessageId]: message.eventId,
        }),
    // The semantic conventions count resends from 1 and leave the first attempt without one.
    ...(resendCount > 0 ? { [ATTR.httpRequestResendCount]: resendCount } : {}),
  };
}

/** An outcome sent without a trace. */
function untraced(outcome: DeliveryOutcome): TracedOutcome {
  return { outcome, ids: NO_IDS };
}

/** `error.type` of a failed attempt: the HTTP status when there was one, else what stopped it. */
function errorType(outcome: DeliveryOutcome): string {
  if (outcome.statusCode !== null) return String(outcome.statusCode);
  if (outcome.blocked) return "blocked";
  if (outcome.error?.startsWith("timeout")) return "timeout";
  return "_OTHER";
}

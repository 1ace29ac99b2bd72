import type { DestinationMessage, DestinationTarget } from "../destinations/index.js";
import type { ClientRow } from "../store/rows.js";
import { isReservedHeader, openHeaders } from "./callback-headers.js";
import { activeSigningKeys } from "./signing-keys.js";
import { WEBHOOK_CONTENT_TYPE, WEBHOOK_USER_AGENT, signatureHeader } from "./sign.js";

/**
 * The headers of one signed message to a client's receiver: task webhooks, test pings and
 * operational notices all go through here, so every way of signing (and every header a client
 * adds) applies to all of them alike.
 */
export interface OutgoingMessage {
  client: ClientRow;
  /** The `webhook-id` (the event's or notice's id). */
  id: string;
  /** When the attempt starts (ms); the signature's timestamp is its seconds. */
  at: number;
  body: string;
  encryptionKey: Buffer | null;
  /** The task's own callback headers (the event's sealed column); they override the client's same-named defaults. */
  callbackHeaders?: string | null;
}

/** One signed message in parts, before any carrier's headers are made of it (a destination's message: destinations/index.ts). */
export interface SignedParts {
  /** `webhook-id`. */
  id: string;
  /** `webhook-timestamp`: whole seconds. */
  timestamp: number;
  /** `webhook-signature`. */
  signature: string;
  contentType: string;
  /** The client's and the task's callback headers: lower-case names, reserved names dropped. */
  headers: Record<string, string>;
}

/**
 * Signs one message: HMAC (`v1`) or Ed25519 (`v1a`) by the client's scheme, every active key during
 * a rotation. Its extra headers are the client's default callback headers under the task's own;
 * content-type, webhook-* and user-agent are never among them (intake and settings refuse those
 * names anyway; this holds for rows written before that check too).
 */
export function signOutgoing(msg: OutgoingMessage): SignedParts {
  const timestamp = Math.floor(msg.at / 1000);
  const signature = signatureHeader(
    activeSigningKeys(msg.client, msg.at, msg.encryptionKey),
    msg.id,
    timestamp,
    msg.body,
  );
  const headers: Record<string, string> = {};
  // Most messages have no callback headers: nothing to open or filter then.
  if (msg.client.callbackHeaders || msg.callbackHeaders) {
    const extra = {
      ...openHeaders(msg.client.callbackHeaders, msg.encryptionKey),
      ...openHeaders(msg.callbackHeaders, msg.encryptionKey),
    };
    for (const [name, value] of Object.entries(extra)) if (!isReservedHeader(name)) headers[name.toLowerCase()] = value;
  }
  return { id: msg.id, timestamp, signature, contentType: WEBHOOK_CONTENT_TYPE, headers };
}

/**
 * One signed message as the destination port takes it (destinations/index.ts): deliveries, test
 * pings and notices are all made here, so all of them pass the same guard, deadline and kind.
 */
export function signedMessage(
  msg: OutgoingMessage & { target: DestinationTarget; type: string; taskId: string | null },
): DestinationMessage {
  const signed = signOutgoing(msg);
  return {
    target: msg.target,
    eventId: signed.id,
    timestamp: signed.timestamp,
    body: msg.body,
    signature: signed.signature,
    contentType: signed.contentType,
    type: msg.type,
    taskId: msg.taskId,
    headers: signed.headers,
  };
}

/** The HTTP headers of a signed message: its extra headers, under the trace context, under the relay's own. */
export function httpHeaders(
  parts: SignedParts & { traceparent?: string | undefined; tracestate?: string | undefined },
): Record<string, string> {
  // One object per attempt, filled in place rather than of spreads.
  const headers: Record<string, string> = { ...parts.headers };
  if (parts.traceparent) headers.traceparent = parts.traceparent;
  if (parts.tracestate) headers.tracestate = parts.tracestate;
  headers["content-type"] = parts.contentType;
  headers["webhook-id"] = parts.id;
  headers["webhook-timestamp"] = String(parts.timestamp);
  headers["webhook-signature"] = parts.signature;
  headers["user-agent"] = WEBHOOK_USER_AGENT;
  return headers;
}

/** Every header of one signed HTTP message (test pings and notices; deliveries go through their destination). */
export function outgoingHeaders(msg: OutgoingMessage): Record<string, string> {
  return httpHeaders(signOutgoing(msg));
}

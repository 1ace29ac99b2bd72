import type { ClientRow } from "../store/store.js";
import { isReservedHeader, openHeaders } from "./callback-headers.js";
import { activeSigningKeys } from "./signing-keys.js";
import { webhookHeaders } from "./sign.js";

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

/**
 * The client's default callback headers, under the task's own, under the relay's: content-type,
 * webhook-* and user-agent are never overridden (intake and settings refuse those names anyway;
 * this holds for rows written before that check too). Signed with HMAC (`v1`) or Ed25519 (`v1a`)
 * by the client's scheme.
 */
export function outgoingHeaders(msg: OutgoingMessage): Record<string, string> {
  const signed = webhookHeaders(
    activeSigningKeys(msg.client, msg.at, msg.encryptionKey),
    msg.id,
    Math.floor(msg.at / 1000),
    msg.body,
  );
  const extra = {
    ...openHeaders(msg.client.callbackHeaders, msg.encryptionKey),
    ...openHeaders(msg.callbackHeaders, msg.encryptionKey),
  };
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(extra)) if (!isReservedHeader(name)) headers[name.toLowerCase()] = value;
  return { ...headers, ...signed };
}

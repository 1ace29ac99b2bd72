import type { ClientRow } from "../store/store.js";
import { activeSecrets } from "../services/clients.js";
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
}

export function outgoingHeaders(msg: OutgoingMessage): Record<string, string> {
  return webhookHeaders(activeSecrets(msg.client, msg.at, msg.encryptionKey), msg.id, Math.floor(msg.at / 1000), msg.body);
}

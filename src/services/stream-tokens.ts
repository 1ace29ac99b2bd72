import { createHmac, timingSafeEqual } from "node:crypto";
import type { ClientRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { requireClientTask } from "./tasks.js";

/** How long a stream token reads its task's stream (docs/contract.md, "Live progress"). */
export const STREAM_TOKEN_TTL_MS = 15 * 60_000;
const PREFIX = "gst_";

/**
 * A token is `gst_<payload>.<mac>`: the payload names the client, the task and the expiry; the MAC
 * is keyed by the client's API key hash, which never leaves the database. So a token needs no
 * storage, every instance checks it alike, and it dies with the key (revoked or rotated).
 */
function mac(client: Pick<ClientRow, "apiKeyHash">, payload: string): Buffer {
  const key = createHmac("sha256", client.apiKeyHash).update("genrelay stream token v1").digest();
  return createHmac("sha256", key).update(payload).digest();
}

/** A token that reads the client's task's event stream for 15 minutes (404 for another's task). */
export async function issueStreamToken(
  deps: Pick<ServiceDeps, "store" | "clock">,
  client: ClientRow,
  taskId: string,
): Promise<{ token: string; expiresAt: number }> {
  await requireClientTask(deps, client.id, taskId);
  const expiresAt = deps.clock.now() + STREAM_TOKEN_TTL_MS;
  const payload = Buffer.from(JSON.stringify([client.id, taskId, expiresAt])).toString("base64url");
  return { token: `${PREFIX}${payload}.${mac(client, payload).toString("base64url")}`, expiresAt };
}

const refused = () =>
  new ApiError("invalid_api_key", "The stream token is unknown, expired, or reads another task's stream.");

/** The client a token reads `taskId`'s stream for, or 401 invalid_api_key: any other task, an expired token, a revoked key. */
export async function clientOfStreamToken(
  deps: Pick<ServiceDeps, "store" | "clock">,
  token: string,
  taskId: string,
): Promise<ClientRow> {
  const [payload = "", given = ""] = token.startsWith(PREFIX) ? token.slice(PREFIX.length).split(".") : [];
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    throw refused();
  }
  if (!Array.isArray(claims) || claims.length !== 3) throw refused();
  const [clientId, forTask, expiresAt] = claims as unknown[];
  if (typeof clientId !== "string" || clientId.length > 100 || typeof expiresAt !== "number" || forTask !== taskId)
    throw refused();
  if (expiresAt <= deps.clock.now()) throw refused();
  const client = await deps.store.clients.find(clientId);
  if (!client || client.revokedAt !== null) throw refused();
  // Compared as text: base64url's last character carries spare bits, so two spellings decode alike.
  const expected = Buffer.from(mac(client, payload).toString("base64url"));
  const actual = Buffer.from(given);
  if (actual.length !== expected.length || !timingSafeEqual(actual, expected)) throw refused();
  return client;
}

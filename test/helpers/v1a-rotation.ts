import { createPublicKey, verify } from "node:crypto";
import { expect } from "vitest";
import type { Received, Receiver } from "./receiver.js";

/**
 * The v1a signatures of a webhook caught during an Ed25519 key rotation's overlap, told apart by
 * the key that made them: `byNew` verifies with the new key (`publicKey`, `whpk_…` as the rotation
 * answers it), `byOld` is the other one; `v1a` is every v1a entry of `webhook-signature`.
 */
export function v1aOfRotation(
  caught: { headers: Record<string, string>; body: string },
  publicKey: string,
): { v1a: string[]; byNew: string | undefined; byOld: string | undefined } {
  const raw = Buffer.from(publicKey.replace(/^whpk_/, ""), "base64");
  const newKey = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
  const v1a = (caught.headers["webhook-signature"] ?? "").split(" ").filter((e) => e.startsWith("v1a,"));
  const content = Buffer.from(`${caught.headers["webhook-id"]}.${caught.headers["webhook-timestamp"]}.${caught.body}`);
  const byNew = v1a.find((e) => verify(null, content, newKey, Buffer.from(e.slice(4), "base64")));
  return { v1a, byNew, byOld: v1a.find((e) => e !== byNew) };
}

/** A client's authenticated call to a relay's API (`Bearer apiKey`, JSON body when given). */
export type RelayCall = (path: string, method: string, json?: unknown) => Promise<Response>;
export const relayCall =
  (baseUrl: string, apiKey: string): RelayCall =>
  (path, method, json) =>
    fetch(`${baseUrl}${path}`, {
      method,
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
      ...(json === undefined ? {} : { body: JSON.stringify(json) }),
    });

/**
 * A real webhook of the relay, caught as it was sent: a signed sample task.succeeded sent through
 * `POST /openapi/v1/webhooks/test` to `hook` (path /rotation), answered as the receiver got it.
 */
export async function catchTestWebhook(call: RelayCall, hook: Receiver): Promise<Received> {
  const seen = hook.requests.length;
  const sent = await call("/openapi/v1/webhooks/test", "POST", {
    url: hook.url("/rotation"),
    type: "task.succeeded",
    task_type: "image",
  });
  expect(sent.status).toBe(200);
  while (hook.requests.length === seen) await hook.next();
  return hook.requests[seen]!;
}

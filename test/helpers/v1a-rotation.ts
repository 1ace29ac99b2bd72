import { createPublicKey, verify } from "node:crypto";

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

import { sealHeaders } from "../../src/webhooks/callback-headers.js";
import { newClient } from "../../src/services/clients.js";
import type { ClientRow } from "../../src/store/rows.js";

/**
 * A client row as signing reads it, without a database: HMAC, no signing key, its default callback
 * headers sealed under `key`; `secret` is its plain `whsec_` secret, for a verifier.
 */
export function signingClient(
  defaults: Record<string, string> | null,
  key: Buffer,
  now = 1_700_000_000_000,
): { row: ClientRow; secret: string } {
  const { row, webhookSecret } = newClient(now, { name: "c", encryptionKey: key });
  return {
    row: {
      ...row,
      callbackHeaders: sealHeaders(defaults, key),
      signatureScheme: "hmac",
      signingKey: null,
      previousSigningKey: null,
      previousSigningKeyExpiresAt: null,
    } as unknown as ClientRow,
    secret: webhookSecret,
  };
}

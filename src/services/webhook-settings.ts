import type { ClientRow } from "../store/rows.js";
import { generateSigningKey, publicKeyOf } from "../webhooks/sign.js";
import { schemeOverlapping, signingSlots } from "../webhooks/signing-keys.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import { callbackHeaderProblems } from "./callback-headers.js";
import { headerNames, openHeaders, sealHeaders } from "../webhooks/callback-headers.js";
import { SECRET_GRACE_MS } from "./clients.js";
import { openSecret, sealSecret } from "../crypto.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError, type FieldProblem } from "./errors.js";

/**
 * A client's webhook defaults (docs/contract.md, "Webhook settings"): where operational notices go, the callback headers
 * every task's webhooks carry (a task's own override same-named ones), and how messages are signed.
 * What is shown of them: the URL, header names only, the scheme and, for ed25519, the public key.
 */
export type SignatureScheme = "hmac" | "ed25519";

export interface WebhookSettingsInput {
  notification_url?: string | null;
  callback_headers?: Record<string, string> | null;
  signature?: SignatureScheme;
}

export interface WebhookSettingsView {
  notification_url: string | null;
  /** Names only: the values are never shown again. */
  callback_headers: string[] | null;
  signature: SignatureScheme;
  public_key?: string;
  /** During a signing-key rotation's overlap: the previous key, still signing beside the new one, and until when. */
  previous_public_key?: string;
  previous_public_key_expires_at?: string;
  /** For 24 hours after a switch of scheme: until when the other scheme's signature is still sent beside this one's. */
  previous_signature_expires_at?: string;
}

type Deps = Pick<ServiceDeps, "store" | "clock" | "config">;

export function settingsView(client: ClientRow, key: Buffer | null, now: number): WebhookSettingsView {
  const names = headerNames(client.callbackHeaders, key);
  const view: WebhookSettingsView = {
    notification_url: client.notificationUrl,
    callback_headers: names.length > 0 ? names : null,
    signature: client.signatureScheme,
  };
  const keys = publicKeys(client, key, now);
  if (keys) {
    view.public_key = keys.current;
    if (keys.previous) {
      view.previous_public_key = keys.previous.key;
      view.previous_public_key_expires_at = new Date(keys.previous.expiresAt).toISOString();
    }
  }
  if (schemeOverlapping(client, now)) {
    view.previous_signature_expires_at = new Date(client.previousSchemeExpiresAt!).toISOString();
  }
  return view;
}

/**
 * The `whpk_` public keys that verify a client's `v1a` signatures now: the keys signingSlots says
 * sign (the current one while ed25519 is the scheme or a switch's overlap runs; the previous one
 * until its rotation's overlap ends). Null when no v1a signature is sent.
 * What settings show and what the JWKS publishes (docs/contract.md, "Published keys").
 */
export function publicKeys(
  client: ClientRow,
  key: Buffer | null,
  now: number,
): { current: string; previous?: { key: string; expiresAt: number } } | null {
  const slots = signingSlots(client, now);
  if (!slots.includes("signingKey")) return null;
  const current = publicKeyOf(openSecret(client.signingKey!, key));
  if (!slots.includes("previousSigningKey")) return { current };
  const previous = publicKeyOf(openSecret(client.previousSigningKey!, key));
  return { current, previous: { key: previous, expiresAt: client.previousSigningKeyExpiresAt! } };
}

/** The patch a settings change makes, or the problems that refuse it (422 / 400 invalid_callback_url). */
function settingsPatch(deps: Deps, client: ClientRow, input: WebhookSettingsInput): Partial<ClientRow> {
  const now = deps.clock.now();
  const key = deps.config.encryptionKey;
  const patch: Partial<ClientRow> = {};
  if (input.notification_url !== undefined) {
    if (input.notification_url === null) patch.notificationUrl = null;
    else {
      const verdict = validateCallbackUrl(input.notification_url, {
        allowPrivateNetworks: deps.config.webhookAllowPrivateNetworks,
      });
      if (!verdict.ok) {
        throw new ApiError("invalid_callback_url", `notification_url is not acceptable: ${verdict.reason}.`, [
          { field: "notification_url", message: verdict.reason },
        ]);
      }
      patch.notificationUrl = verdict.url;
    }
  }
  if (input.callback_headers !== undefined) {
    const problems: FieldProblem[] = callbackHeaderProblems(input.callback_headers);
    if (problems.length > 0) throw new ApiError("validation_error", "Some callback headers are invalid.", problems);
    patch.callbackHeaders = sealHeaders(input.callback_headers, key);
  }
  if (input.signature !== undefined && input.signature !== client.signatureScheme) {
    patch.signatureScheme = input.signature;
    // The old scheme's signature keeps coming beside the new one for 24 hours, so receivers can move
    // without losing webhooks; the same scheme again changes nothing. Switching back during the
    // overlap starts a new one: the scheme left behind is again the one receivers may still verify.
    patch.previousSchemeExpiresAt = now + SECRET_GRACE_MS;
    // The key pair is made once and kept: switching back and forth keeps the receiver's public key.
    if (input.signature === "ed25519" && !client.signingKey) patch.signingKey = sealSecret(generateSigningKey(), key);
  }
  return patch;
}

export async function getWebhookSettings(deps: Deps, clientId: string): Promise<WebhookSettingsView> {
  const client = (await deps.store.clients.find(clientId))!;
  return settingsView(client, deps.config.encryptionKey, deps.clock.now());
}

export async function updateWebhookSettings(
  deps: Deps,
  clientId: string,
  input: WebhookSettingsInput,
): Promise<WebhookSettingsView> {
  const current = await deps.store.clients.find(clientId);
  if (!current) throw new ApiError("not_found", "No such client.");
  const updated = await deps.store.clients.updateWith(clientId, (client) => ({
    patch: settingsPatch(deps, client, input),
    result: null,
  }));
  return settingsView(updated!.client, deps.config.encryptionKey, deps.clock.now());
}

/**
 * Adds or replaces one default callback header (a value) or removes it (null), keeping the others:
 * the dashboard's form, which never holds the values already stored. Same rules as PUT settings.
 */
export async function changeDefaultHeader(
  deps: Deps,
  clientId: string,
  name: string,
  value: string | null,
): Promise<WebhookSettingsView> {
  const key = deps.config.encryptionKey;
  const updated = await deps.store.clients.updateWith(clientId, (client) => {
    const others = Object.entries(openHeaders(client.callbackHeaders, key)).filter(([n]) => n !== name.toLowerCase());
    const headers = Object.fromEntries(value === null ? others : [...others, [name, value]]);
    return { patch: settingsPatch(deps, client, { callback_headers: headers }), result: null };
  });
  if (!updated) throw new ApiError("not_found", "No such client.");
  return settingsView(updated.client, key, deps.clock.now());
}

/**
 * A new Ed25519 signing key; the previous keeps signing beside it (two v1a signatures) for the
 * same 24 hours as a rotated whsec_ secret. Returns the new public key.
 */
export async function rotateSigningKey(
  deps: Pick<ServiceDeps, "store" | "clock">,
  clientId: string,
  encryptionKey: Buffer | null,
) {
  const now = deps.clock.now();
  const signingKey = generateSigningKey();
  const rotated = await deps.store.clients.updateWith(clientId, (client) => ({
    patch: {
      signingKey: sealSecret(signingKey, encryptionKey),
      previousSigningKey: client.signingKey,
      previousSigningKeyExpiresAt: client.signingKey ? now + SECRET_GRACE_MS : null,
    },
    result: null,
  }));
  return rotated
    ? { client: rotated.client, publicKey: publicKeyOf(signingKey), previousExpiresAt: now + SECRET_GRACE_MS }
    : undefined;
}

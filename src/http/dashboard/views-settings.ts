import { html } from "hono/html";
import type { WebhookSettingsView } from "../../services/webhook-settings.js";
import { csrfField, notice, time, type Html } from "./layout.js";

/** On every signed-in page in sandbox mode: nothing here is a real generation (docs/contract.md, "Intake"). */
export function sandboxBanner(): Html {
  return html`<section class="notice error sandbox-banner" role="status" aria-label="Sandbox mode"><strong>Sandbox mode:</strong> no UPSTREAM_BASE_URL is set, so the built-in simulator answers and every result here is simulated.</section>`;
}

export interface SettingsPageView {
  csrf: string;
  settings: WebhookSettingsView;
  /** Whether header values are sealed at rest (RELAY_ENCRYPTION_KEY set). */
  sealed: boolean;
  saved?: string;
  error?: string;
  /** What was typed in the notification URL field, shown again after a refusal. */
  typedUrl?: string;
  /** The header name typed, shown again after a refusal (never its value). */
  typedName?: string;
}

/** Webhook settings (docs/contract.md, "Webhook settings"): the same defaults as GET/PUT /openapi/v1/webhooks/settings; header values never shown. */
export function settingsBody(v: SettingsPageView): Html {
  const s = v.settings;
  const names = s.callback_headers ?? [];
  return html`<h1>Webhook settings</h1>
${v.saved ? notice("ok", v.saved) : ""}
${v.error ? notice("error", v.error) : ""}
<section class="panel" aria-labelledby="h-notify"><h2 id="h-notify">Notification URL</h2>
  <p class="muted">Where <code>endpoint.failing</code>, <code>endpoint.recovered</code> and <code>delivery.exhausted</code> notices go, signed like webhooks. Leave empty for none.</p>
  <form class="row" method="post" action="/dashboard/settings/notification">${csrfField(v.csrf)}
    <div class="grow"><label for="notification_url">Notification URL</label><input id="notification_url" name="notification_url" type="url" value="${v.typedUrl ?? s.notification_url ?? ""}" placeholder="https://example.com/hooks/genrelay-ops" spellcheck="false"></div>
    <div><button class="btn" type="submit">Save URL</button></div>
  </form>
</section>
<section class="panel" aria-labelledby="h-headers"><h2 id="h-headers">Default callback headers</h2>
  <p class="muted">Sent with every attempt of every task's webhooks (a task's own <code>callback_headers</code> override same-named ones): a token that an n8n, Make or Zapier catch hook checks. Values are ${v.sealed ? "encrypted at rest and " : ""}never shown again; only names are listed.</p>
  ${
    names.length > 0
      ? html`<div class="table-wrap"><table class="stack" id="callback-headers"><caption class="sr-only">Default callback headers (names only)</caption><thead><tr><th scope="col">Header</th><th scope="col">Value</th><th scope="col">Action</th></tr></thead><tbody>
    ${names.map(
      (name) =>
        html`<tr><td data-label="Header" class="mono">${name}</td><td data-label="Value" class="muted">set (hidden)</td><td data-label="Action"><form method="post" action="/dashboard/settings/headers/remove">${csrfField(v.csrf)}<input type="hidden" name="name" value="${name}"><button class="btn secondary" type="submit" aria-label="Remove ${name}">Remove</button></form></td></tr>`,
    )}
  </tbody></table></div>
  <form method="post" action="/dashboard/settings/headers/clear">${csrfField(v.csrf)}<button class="btn secondary" type="submit">Clear all headers</button></form>`
      : html`<p>No default callback headers are set.</p>`
  }
  <form class="row" method="post" action="/dashboard/settings/headers">${csrfField(v.csrf)}
    <div><label for="header_name">Header name</label><input id="header_name" name="name" type="text" required maxlength="64" value="${v.typedName ?? ""}" placeholder="X-Webhook-Token" spellcheck="false" autocomplete="off"></div>
    <div class="grow"><label for="header_value">Value</label><input id="header_value" name="value" type="password" required maxlength="1024" autocomplete="off"></div>
    <div><button class="btn" type="submit">Add or replace</button></div>
  </form>
</section>
<section class="panel" aria-labelledby="h-signature"><h2 id="h-signature">Signature</h2>
  <form method="post" action="/dashboard/settings/signature">${csrfField(v.csrf)}
    <fieldset><legend>How webhooks are signed</legend>
      <div><label><input type="radio" name="signature" value="hmac"${s.signature === "hmac" ? html` checked` : ""}> HMAC-SHA256 (<code>v1</code>) with your <code>whsec_</code> secret</label></div>
      <div><label><input type="radio" name="signature" value="ed25519"${s.signature === "ed25519" ? html` checked` : ""}> Ed25519 (<code>v1a</code>): verify with a public key, no shared secret</label></div>
    </fieldset>
    <button class="btn" type="submit">Save signature</button>
  </form>
  ${s.previous_signature_expires_at ? html`<p class="muted">Since the switch, the previous scheme's signature (<code>${s.signature === "ed25519" ? "v1" : "v1a"}</code>) is still sent beside the new one until ${time(Date.parse(s.previous_signature_expires_at))}, so receivers can move.</p>` : ""}
  ${
    s.signature === "ed25519" && s.public_key
      ? html`<p><label for="public-key">Public key</label><output id="public-key" class="secret mono">${s.public_key}</output></p>
  ${s.previous_public_key ? html`<p class="muted">The previous key <code>${s.previous_public_key}</code> still signs beside it until ${time(Date.parse(s.previous_public_key_expires_at!))}.</p>` : ""}
  <p class="muted">Verify each <code>v1a</code> signature over <code>{webhook-id}.{webhook-timestamp}.{body}</code> with this key; see the receiving guide.</p>`
      : ""
  }
</section>`;
}

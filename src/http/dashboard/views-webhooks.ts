import { html } from "hono/html";
import { badge, csrfField, notice, time, type Html } from "./layout.js";

export interface HostHealthRow {
  host: string;
  state: "closed" | "open" | "half-open";
  failures: number;
}

/** Resolves breaker state for a client's callback hosts; optional, wired in relay.ts. */
export type HostHealth = (clientId: string, hosts: string[]) => HostHealthRow[];

export interface PingResult {
  webhook_id: string;
  url: string;
  succeeded: boolean;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

export interface WebhooksView {
  csrf: string;
  hosts: string[];
  health: HostHealthRow[] | null;
  defaultSince: string;
  testUrl?: string;
  ping?: PingResult;
  rotated?: { secret: string; previousExpiresAt: number };
  /** An Ed25519 client's rotation: the new public key (the signing key never leaves the relay). */
  rotatedKey?: { publicKey: string; previousExpiresAt: number };
  recovered?: number;
  error?: string;
}

export function webhooksBody(v: WebhooksView): Html {
  const health = new Map((v.health ?? []).map((h) => [h.host, h]));
  return html`<h1>Webhooks</h1>
${v.error ? notice("error", v.error) : ""}
<section class="panel" aria-labelledby="h-ping"><h2 id="h-ping">Send a test ping</h2>
  <p class="muted">A signed <code>ping</code> event, through the same address checks and signer as real deliveries.</p>
  <form class="row" method="post" action="/dashboard/webhooks/test">${csrfField(v.csrf)}
    <div class="grow"><label for="url">Receiver URL</label><input id="url" name="url" type="url" required value="${v.testUrl ?? ""}" placeholder="https://example.com/webhooks" spellcheck="false"></div>
    <div><button class="btn" type="submit">Send ping</button></div>
  </form>
  ${v.ping ? pingResult(v.ping) : ""}
</section>
<section class="panel" aria-labelledby="h-secret"><h2 id="h-secret">Signing secret</h2>
  ${
    v.rotated
      ? html`${notice("ok", "New secret created. Copy it now: it is not shown again.")}
  <p><label for="new-secret">New webhook secret</label><output id="new-secret" class="secret mono">${v.rotated.secret}</output></p>
  <p class="muted">The previous secret keeps signing beside it until ${time(v.rotated.previousExpiresAt)}, so receivers can switch without losing a webhook.</p>`
      : v.rotatedKey
        ? html`${notice("ok", "New Ed25519 key pair created.")}
  <p><label for="new-public-key">New public key</label><output id="new-public-key" class="secret mono">${v.rotatedKey.publicKey}</output></p>
  <p class="muted">The previous key keeps signing beside it (two <code>v1a</code> signatures) until ${time(v.rotatedKey.previousExpiresAt)}.</p>`
        : html`<p class="muted">Rotating makes a new <code>whsec_</code> secret (or, with Ed25519 signing, a new key pair); the old one keeps signing beside it for 24 hours. <a href="/dashboard/settings">Webhook settings</a>: notification URL, default callback headers, signature scheme.</p>`
  }
  <form method="post" action="/dashboard/webhooks/rotate">${csrfField(v.csrf)}<button class="btn secondary" type="submit">Rotate secret</button></form>
</section>
<section class="panel" aria-labelledby="h-recover"><h2 id="h-recover">Recover failed deliveries</h2>
  ${v.recovered !== undefined ? notice("ok", `${v.recovered} failed deliver${v.recovered === 1 ? "y" : "ies"} queued again.`) : ""}
  <form class="row" method="post" action="/dashboard/webhooks/recover">${csrfField(v.csrf)}
    <div class="grow"><label for="since">Failed since (UTC)</label><input id="since" name="since" type="datetime-local" required value="${v.defaultSince}"></div>
    <div><button class="btn secondary" type="submit">Recover</button></div>
  </form>
</section>
<section aria-labelledby="h-hosts"><h2 id="h-hosts">Callback hosts</h2>
  ${
    v.hosts.length === 0
      ? html`<p class="panel">None yet: hosts appear once tasks carry a callback_url.</p>`
      : html`<div class="table-wrap"><table><thead><tr><th scope="col">Host</th><th scope="col">Circuit breaker</th><th scope="col">Consecutive failures</th></tr></thead>
  <tbody>${v.hosts.map((host) => {
    const h = health.get(host);
    return html`<tr><td class="mono">${host}</td><td>${h ? badge(h.state) : html`<span class="muted">unknown</span>`}</td><td>${h ? h.failures : "—"}</td></tr>`;
  })}</tbody></table></div>
  <p class="muted">Open: deliveries to the host pause after repeated failures, then one trial request probes it (half-open).</p>`
  }
</section>`;
}

function pingResult(p: PingResult): Html {
  return html`<div role="status">
  <h3>Result: ${badge(p.succeeded ? "succeeded" : "failed")}</h3>
  <dl class="kv">
    <dt>URL</dt><dd class="mono">${p.url}</dd>
    <dt>Status code</dt><dd>${p.status_code ?? "—"}</dd>
    <dt>Latency</dt><dd>${p.latency_ms} ms</dd>
    <dt>webhook-id</dt><dd class="mono">${p.webhook_id}</dd>
    ${p.error ? html`<dt>Error</dt><dd>${p.error}</dd>` : ""}
  </dl>
</div>`;
}

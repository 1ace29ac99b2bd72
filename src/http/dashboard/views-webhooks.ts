import { html } from "hono/html";
import type { KeyHealthRow } from "../../store/rows.js";
import type { EndpointEventType, EndpointView } from "../../services/webhook-endpoints.js";
import { DEFAULT_ENDPOINT_EVENTS, ENDPOINT_EVENT_TYPES } from "../../store/endpoint-fanout.js";
import { badge, csrfField, duration, notice, time, type Html } from "./layout.js";

/** The kinds the add form offers (docs/destinations.md), each with its own fields. */
export const ENDPOINT_KINDS = ["webhook", "amqp", "nats", "sqs"] as const;
export type EndpointKind = (typeof ENDPOINT_KINDS)[number];
const KIND_LABELS: Record<EndpointKind, string> = {
  webhook: "HTTP (webhook)",
  amqp: "RabbitMQ (amqp)",
  nats: "NATS JetStream (nats)",
  sqs: "Amazon SQS (sqs)",
};

/** The add form's fields kept when it is refused; the password inputs (credentials) never are. */
export const DRAFT_FIELDS = [
  "url",
  "amqp_url",
  "amqp_user",
  "exchange",
  "routing_key",
  "nats_url",
  "nats_user",
  "subject",
  "queue_url",
  "region",
  "access_key_id",
  "sqs_endpoint",
] as const;
export type EndpointDraft = { type: EndpointKind; description: string; events: EndpointEventType[] } & Partial<
  Record<(typeof DRAFT_FIELDS)[number], string>
>;

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

/** One of the client's callback hosts: its failing run (if it answers no 2xx now) and its waiting events. */
export interface CallbackHost {
  host: string;
  failing: KeyHealthRow | null;
  pending: number;
}

export interface WebhooksView {
  csrf: string;
  now: number;
  hosts: CallbackHost[];
  /** The client's endpoints (subscribed URLs), oldest first. */
  endpoints: EndpointView[];
  health: HostHealthRow[] | null;
  /** The client's events pending again after a failed attempt: what Recover does not touch. */
  retrying: number;
  defaultSince: string;
  retried?: { host: string; requeued: number };
  testUrl?: string;
  ping?: PingResult;
  rotated?: { secret: string; previousExpiresAt: number };
  /** An Ed25519 client's rotation: the new public key (the signing key never leaves the relay). */
  rotatedKey?: { publicKey: string; previousExpiresAt: number };
  recovered?: number;
  endpointAdded?: EndpointView;
  endpointRemoved?: string;
  /** The add form as it was sent (its secrets left out), when it was refused. */
  endpointDraft?: EndpointDraft | undefined;
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
${endpointsPanel(v)}
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
  ${retryingNote(v.retrying)}
  <form class="row" method="post" action="/dashboard/webhooks/recover">${csrfField(v.csrf)}
    <div class="grow"><label for="since">Failed since (UTC)</label><input id="since" name="since" type="datetime-local" required value="${v.defaultSince}"></div>
    <div><button class="btn secondary" type="submit">Recover</button></div>
  </form>
</section>
<section aria-labelledby="h-hosts"><h2 id="h-hosts">Callback hosts</h2>
  ${v.retried ? notice("ok", retriedText(v.retried)) : ""}
  ${v.hosts.length === 0 ? html`<p class="panel">None yet: hosts appear once tasks carry a callback_url.</p>` : hostsTable(v, health)}
</section>`;
}

function endpointsPanel(v: WebhooksView): Html {
  const draft = v.endpointDraft;
  const checked = (e: EndpointEventType) =>
    (draft && draft.events.length > 0 ? draft.events : DEFAULT_ENDPOINT_EVENTS).includes(e as never);
  const row = (e: EndpointView) =>
    html`<tr><td data-label="URL" class="mono">${e.url}</td><td data-label="Events">${e.events.join(", ")}</td>
<td data-label="Description">${e.description ?? "—"}</td><td data-label="Kind">${kindCell(e)}</td><td data-label="Created">${time(Date.parse(e.created_at))}</td>
<td data-label="Action"><form method="post" action="/dashboard/webhooks/endpoints/delete">${csrfField(v.csrf)}<input type="hidden" name="id" value="${e.id}"><button class="btn secondary" type="submit" aria-label="Remove endpoint ${e.url}">Remove</button></form></td></tr>`;
  return html`<section class="panel" aria-labelledby="h-endpoints"><h2 id="h-endpoints">Endpoints</h2>
  <p class="muted">Every event of your tasks whose type an endpoint subscribes to is delivered to it, beside the task's own callback_url: same webhook-id, body and signature, its own retries. Removing one ends its pending deliveries.</p>
  ${v.endpointAdded ? notice("ok", `Endpoint ${v.endpointAdded.id} added.`) : ""}
  ${v.endpointRemoved ? notice("ok", `Endpoint ${v.endpointRemoved} removed; its pending deliveries ended.`) : ""}
  ${
    v.endpoints.length === 0
      ? html`<p id="no-endpoints">No endpoint yet.</p>`
      : html`<div class="table-wrap"><table class="stack" id="endpoints"><caption class="sr-only">Your endpoints, oldest first</caption>
<thead><tr><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Description</th><th scope="col">Kind</th><th scope="col">Created</th><th scope="col"><span class="sr-only">Action</span></th></tr></thead>
<tbody>${v.endpoints.map(row)}</tbody></table></div>`
  }
  <form method="post" action="/dashboard/webhooks/endpoints">${csrfField(v.csrf)}
    <div class="row">
      <div><label for="endpoint-type">Kind</label><select id="endpoint-type" name="type">${ENDPOINT_KINDS.map((k) => html`<option value="${k}"${(draft?.type ?? "webhook") === k ? html` selected` : ""}>${KIND_LABELS[k]}</option>`)}</select></div>
      <div class="grow"><label for="endpoint-description">Description</label><input id="endpoint-description" name="description" maxlength="500" value="${draft?.description ?? ""}"></div>
    </div>
    <p class="muted">Fill in the fields of the kind picked; the others are ignored. Passwords, tokens and secret keys are sealed at rest and never shown again.</p>
    <fieldset data-kind="webhook"><legend>${KIND_LABELS.webhook}</legend>
      ${field("url", "Endpoint URL", "url", draft, "https://example.com/webhooks")}
    </fieldset>
    <fieldset data-kind="amqp"><legend>${KIND_LABELS.amqp}</legend><div class="row">
      ${field("amqp_url", "Broker URL", "text", draft, "amqps://mq.example.com:5671/vhost")}
      ${field("exchange", "Exchange", "text", draft, "genrelay")}
      ${field("routing_key", "Routing key (default: the event type)", "text", draft)}
      ${field("amqp_user", "User", "text", draft)}
      ${field("amqp_password", "Password", "password")}
    </div></fieldset>
    <fieldset data-kind="nats"><legend>${KIND_LABELS.nats}</legend><div class="row">
      ${field("nats_url", "Server URL", "text", draft, "tls://nats.example.com:4222")}
      ${field("subject", "Subject (default: genrelay.<event type>)", "text", draft)}
      ${field("nats_user", "User", "text", draft)}
      ${field("nats_password", "Password", "password")}
      ${field("nats_token", "Token", "password")}
    </div></fieldset>
    <fieldset data-kind="sqs"><legend>${KIND_LABELS.sqs}</legend><div class="row">
      ${field("queue_url", "Queue URL", "url", draft, "https://sqs.eu-west-1.amazonaws.com/123456789012/events")}
      ${field("region", "Region", "text", draft, "eu-west-1")}
      ${field("access_key_id", "Access key id", "text", draft)}
      ${field("secret_access_key", "Secret access key", "password")}
      ${field("sqs_endpoint", "Endpoint (SQS-compatible server, optional)", "url", draft)}
    </div></fieldset>
    <fieldset><legend>Events</legend>
      ${ENDPOINT_EVENT_TYPES.map((e) => html`<label><input type="checkbox" name="events" value="${e}"${checked(e) ? html` checked` : ""}> <code>${e}</code></label> `)}
    </fieldset>
    <button class="btn" type="submit">Add endpoint</button>
  </form>
</section>`;
}

/** One input of the add form; a password input is always empty (a secret is never sent back). */
function field(
  name: string,
  label: string,
  type: "text" | "url" | "password",
  draft?: EndpointDraft,
  placeholder = "",
): Html {
  const value = type === "password" ? "" : ((draft?.[name as keyof EndpointDraft] as string | undefined) ?? "");
  return html`<div class="grow"><label for="endpoint-${name}">${label}</label><input id="endpoint-${name}" name="${name}" type="${type}" value="${value}"${placeholder ? html` placeholder="${placeholder}"` : ""}${type === "password" ? html` autocomplete="off"` : html` spellcheck="false"`}></div>`;
}

/** An endpoint's kind and the settings it delivers with (never its credentials: the view has none). */
function kindCell(e: EndpointView): Html {
  if (e.type === "amqp")
    return html`amqp <span class="muted">exchange <code>${e.exchange}</code>, routing key ${e.routing_key ? html`<code>${e.routing_key}</code>` : "the event type"}</span>`;
  if (e.type === "nats")
    return html`nats <span class="muted">subject <code>${e.subject ?? "genrelay.<event type>"}</code></span>`;
  if (e.type === "sqs")
    return html`sqs <span class="muted">${e.region}, key <code>${e.access_key_id}</code>${e.endpoint ? html`, via ${e.endpoint}` : ""}</span>`;
  return html`webhook`;
}

/** Recover re-queues failed deliveries only: say what is still retrying, so "0" is never the whole story. */
function retryingNote(retrying: number): Html | string {
  if (retrying === 0) return html`<p class="muted" id="retrying">No delivery is retrying now.</p>`;
  const n = retrying === 1 ? "1 delivery is" : `${retrying} deliveries are`;
  return html`<p id="retrying"><strong>${n} retrying</strong> after a failed attempt. Recover leaves ${retrying === 1 ? "it" : "them"} alone (${retrying === 1 ? "it is" : "they are"} not failed yet): use <em>Retry now</em> on the host below to send ${retrying === 1 ? "it" : "them"} at once, or see the <a href="/dashboard?delivery=failing">tasks with delivery failing</a>.</p>`;
}

function retriedText(r: { host: string; requeued: number }): string {
  if (r.requeued === 0) return `No webhook to ${r.host} is waiting: nothing to retry.`;
  return `${r.requeued} webhook${r.requeued === 1 ? "" : "s"} to ${r.host} sent now, as a trial.`;
}

function hostsTable(v: WebhooksView, health: Map<string, HostHealthRow>): Html {
  const row = ({ host, failing, pending }: CallbackHost) => {
    const h = health.get(host);
    const since = failing?.failingSince ?? null;
    const state =
      since !== null
        ? html`${badge("failing")} <span class="muted">since ${time(since)} (${duration(v.now - since)})</span>`
        : badge("ok");
    const retry =
      since !== null || pending > 0
        ? html`<form method="post" action="/dashboard/webhooks/hosts/retry">${csrfField(v.csrf)}<input type="hidden" name="host" value="${host}"><button class="btn secondary" type="submit" aria-label="Retry now: ${host}">Retry now</button></form>`
        : "";
    return html`<tr><td data-label="Host" class="mono">${host}</td><td data-label="State">${state}</td>
<td data-label="Failed attempts">${since !== null ? failing!.failedAttempts : "—"}</td>
<td data-label="Last error">${since !== null && failing!.lastError ? failing!.lastError : "—"}</td>
<td data-label="Pending events">${pending}</td>
<td data-label="Circuit breaker">${h ? html`${badge(h.state)}${h.failures > 0 ? html` <span class="muted">${h.failures} in a row</span>` : ""}` : html`<span class="muted">unknown</span>`}</td>
<td data-label="Action">${retry}</td></tr>`;
  };
  return html`<div class="table-wrap"><table class="stack" id="callback-hosts"><caption class="sr-only">Callback hosts, failing first</caption>
<thead><tr><th scope="col">Host</th><th scope="col">State</th><th scope="col">Failed attempts</th><th scope="col">Last error</th><th scope="col">Pending events</th><th scope="col">Circuit breaker</th><th scope="col"><span class="sr-only">Action</span></th></tr></thead>
<tbody>${v.hosts.map(row)}</tbody></table></div>
<p class="muted">Failing: the host has answered no 2xx since then; its webhooks wait and are retried, none is lost. Retry now sends the host's waiting webhooks at once. Circuit breaker open: deliveries to a host answering no 2xx at all pause, then one trial request probes it (half-open).</p>`;
}

/**
 * On every signed-in page while any of the client's callback hosts answers no 2xx: which, since
 * when, and where to act. Inside <main>, so the task page's refresh updates it too.
 */
export function failingBanner(failing: KeyHealthRow[], now: number): Html | string {
  const rows = failing.filter((f) => f.failingSince !== null);
  if (rows.length === 0) return "";
  const shown = rows.slice(0, 3);
  return html`<section class="notice error failing-banner" aria-labelledby="failing-title">
<h2 id="failing-title">${rows.length === 1 ? "A callback host is failing" : `${rows.length} callback hosts are failing`}</h2>
<ul>${shown.map((f) => html`<li><span class="mono">${f.host}</span> has answered no 2xx since ${time(f.failingSince)} (${duration(now - f.failingSince!)}, ${f.failedAttempts} failed attempt${f.failedAttempts === 1 ? "" : "s"})${f.lastError ? html`: <span class="muted">${f.lastError}</span>` : ""}</li>`)}</ul>
${rows.length > shown.length ? html`<p>and ${rows.length - shown.length} more.</p>` : ""}
<p>Webhooks to ${rows.length === 1 ? "it" : "them"} wait and are retried; none is lost. <a href="/dashboard/webhooks#h-hosts">See callback hosts and retry now</a></p>
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

import { html } from "hono/html";
import type { StorageView } from "../../mirror/stored-bucket.js";
import { csrfField, notice, type Html } from "./layout.js";

export interface StoragePageView {
  csrf: string;
  storage: StorageView | null;
  /** Whether the relay can seal a secret (RELAY_ENCRYPTION_KEY set). */
  canSeal: boolean;
  saved?: string;
  error?: string;
  /** What was typed, shown again after a refusal (never the secret). */
  typed?: Partial<Record<string, string>>;
}

/** The bucket page: where succeeded tasks' output files are copied before task.succeeded (docs/contract.md, "Outputs"). */
export function storageBody(v: StoragePageView): Html {
  const s = v.storage;
  const val = (name: keyof StorageView, fallback = "") => v.typed?.[name] ?? (s ? String(s[name] ?? "") : fallback);
  const field = (
    name: keyof StorageView,
    label: string,
    attrs: { type?: string; placeholder?: string; required?: boolean } = {},
  ) =>
    html`<div><label for="st-${name}">${label}</label><input id="st-${name}" name="${name}" type="${attrs.type ?? "text"}" value="${val(name)}"${
      attrs.placeholder ? html` placeholder="${attrs.placeholder}"` : ""
    }${attrs.required ? html` required` : ""} spellcheck="false"></div>`;
  return html`<h1>Storage</h1>
${v.saved ? notice("ok", v.saved) : ""}
${v.error ? notice("error", v.error) : ""}
<section class="panel" aria-labelledby="h-bucket"><h2 id="h-bucket">Your bucket</h2>
  <p class="muted">With a bucket set, every file URL in a succeeded task's output is copied into it (as
  <code>&lt;prefix&gt;&lt;task id&gt;/&lt;n&gt;&lt;ext&gt;</code>) before <code>task.succeeded</code> is sent; the event and task reads
  then carry <code>data.files</code> with links that outlive the upstream's.</p>
  ${
    s
      ? html`<dl class="facts"><dt>Endpoint</dt><dd><code>${s.endpoint}</code></dd><dt>Bucket</dt><dd><code>${s.bucket}</code> (${s.region})</dd>
      <dt>Prefix</dt><dd><code>${s.prefix || "(none)"}</code></dd><dt>Access key id</dt><dd><code>${s.access_key_id}</code></dd>
      <dt>Links</dt><dd>${s.public_base_url ? html`<code>${s.public_base_url}</code>/key` : `presigned, valid ${Math.round(s.url_expires_in / 3600)} h`}</dd></dl>
      <form method="post" action="/dashboard/storage/remove">${csrfField(v.csrf)}<button class="btn secondary" type="submit">Remove bucket</button></form>`
      : html`<p>No bucket is set: outputs are passed on with the upstream's own URLs, which expire.</p>`
  }
</section>
<section class="panel" aria-labelledby="h-set"><h2 id="h-set">${s ? "Replace the bucket" : "Set a bucket"}</h2>
  ${
    v.canSeal
      ? html`<form method="post" action="/dashboard/storage">${csrfField(v.csrf)}
    ${field("endpoint", "Endpoint (S3-compatible)", { type: "url", placeholder: "https://s3.eu-west-1.amazonaws.com", required: true })}
    ${field("bucket", "Bucket", { required: true })}
    ${field("region", "Region", { placeholder: "us-east-1", required: true })}
    ${field("prefix", "Key prefix", { placeholder: "genrelay/" })}
    ${field("access_key_id", "Access key id", { required: true })}
    <div><label for="st-secret">Secret access key</label><input id="st-secret" name="secret_access_key" type="password" autocomplete="off" required></div>
    <div><label><input type="checkbox" name="force_path_style" value="true"${s?.force_path_style ? html` checked` : ""}> Path-style addressing (MinIO, most self-hosted servers)</label></div>
    ${field("public_base_url", "Public base URL (optional: links are this + key instead of presigned)", { type: "url" })}
    <p class="muted">The secret is encrypted at rest and never shown again.</p>
    <button class="btn" type="submit">Save bucket</button>
  </form>`
      : html`<p role="alert">This relay has no <code>RELAY_ENCRYPTION_KEY</code>, so it cannot keep a bucket's secret; ask its operator to set one.</p>`
  }
</section>`;
}

import { html } from "hono/html";
import { TASK_STATUSES, type TaskStatus } from "../../statuses.js";
import { TERMINAL_STATUSES } from "../../core/transition.js";
import type { TaskDetail, TaskListItem, TimelineEntry } from "../../services/dashboard.js";
import { cancelRefusal } from "../../services/tasks.js";
import type { AttemptRow, EventRow, TaskRow } from "../../store/rows.js";
import { badge, csrfField, duration, notice, time, type Html } from "./layout.js";
import { isWebUrl, type Preview, type ShownOutput } from "./previews.js";

export interface TaskFilters {
  status?: string | undefined;
  type?: string | undefined;
  q?: string | undefined;
  /** "failing": tasks whose last webhook failed or is being retried after a failed attempt. */
  delivery?: string | undefined;
}

/** Run time: creation to completion, or so far for a task still running. */
export function taskDuration(
  t: { createdAt: number; completedAt: number | null; status: TaskStatus },
  now: number,
): string {
  if (t.completedAt !== null) return duration(t.completedAt - t.createdAt);
  return TERMINAL_STATUSES.has(t.status) ? "—" : `${duration(now - t.createdAt)} so far`;
}

function option(value: string, label: string, selected: string | undefined): Html {
  return html`<option value="${value}"${selected === value ? html` selected` : ""}>${label}</option>`;
}

export function tasksBody(items: TaskListItem[], filters: TaskFilters, nextBefore: string | null, now: number): Html {
  const query = (extra: Record<string, string>) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries({
      status: filters.status,
      type: filters.type,
      delivery: filters.delivery,
      q: filters.q,
      ...extra,
    }))
      if (v) p.set(k, v);
    const s = p.toString();
    return s ? `/dashboard?${s}` : "/dashboard";
  };
  const filtered = Boolean(filters.status || filters.type || filters.delivery || filters.q);
  return html`<h1>Tasks</h1>
<form class="panel row" method="get" action="/dashboard" role="search">
  <div class="grow"><label for="q">Search</label>
    <input id="q" name="q" type="search" value="${filters.q ?? ""}" placeholder="task_…, upstream id or metadata value" spellcheck="false"></div>
  <div><label for="status">Status</label>
    <select id="status" name="status">${option("", "Any", filters.status)}${TASK_STATUSES.map((s) => option(s, s, filters.status))}</select></div>
  <div><label for="type">Type</label>
    <select id="type" name="type">${option("", "Any", filters.type)}${option("image", "image", filters.type)}${option("video", "video", filters.type)}</select></div>
  <div><label for="delivery">Delivery</label>
    <select id="delivery" name="delivery">${option("", "Any", filters.delivery)}${option("failing", "failing (failed or retrying)", filters.delivery)}</select></div>
  <div><button class="btn" type="submit">Show</button>${filtered ? html` <a href="/dashboard">Clear</a>` : ""}</div>
</form>
${
  items.length === 0
    ? html`<p class="panel">${filtered ? "No task matches." : "No tasks yet. Create one through the API with a callback_url, and it appears here."}</p>`
    : html`<div class="table-wrap"><table class="stack">
  <caption class="sr-only">Tasks, newest first</caption>
  <thead><tr><th scope="col">Task</th><th scope="col">Type</th><th scope="col">Model</th><th scope="col">Status</th><th scope="col">Delivery</th><th scope="col">Created</th><th scope="col">Duration</th></tr></thead>
  <tbody>${items.map(
    ({ task, delivery }) => html`<tr>
    <td data-label="Task"><span><a class="mono" href="/dashboard/tasks/${task.id}">${task.id}</a>${task.upstreamTaskId ? html`<br><span class="muted mono">${task.upstreamTaskId}</span>` : ""}</span></td>
    <td data-label="Type">${task.type}</td><td data-label="Model">${task.model}</td><td data-label="Status">${badge(task.status)}</td>
    <td data-label="Delivery">${badge(delivery.status)}${delivery.last_status_code !== null ? html` <span class="muted">${delivery.last_status_code}</span>` : ""}</td>
    <td data-label="Created">${time(task.createdAt)}</td><td data-label="Duration">${taskDuration(task, now)}</td></tr>`,
  )}</tbody></table></div>`
}
<nav class="pager" aria-label="Pages">${filtered || items.length > 0 ? html`<a href="${query({})}">Newest</a>` : ""}${nextBefore ? html`<a href="${query({ before: nextBefore })}">Older tasks →</a>` : ""}</nav>`;
}

const pretty = (value: unknown) => JSON.stringify(value, null, 2);

function parse(text: string | null): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** When a pending event goes out next: on-call's first question about a webhook that has not arrived. */
function nextAttempt(e: EventRow, now: number): Html | string {
  if (e.deliveryStatus !== "pending") return "";
  if (e.claimedUntil !== null && e.claimedUntil > now)
    return html` <span class="muted next-attempt">sending now</span>`;
  if (e.nextAttemptAt === null) return "";
  const wait = e.nextAttemptAt - now;
  return html` <span class="muted next-attempt">next attempt ${wait <= 0 ? "due now" : html`${time(e.nextAttemptAt)} (in ${duration(wait)})`}</span>`;
}

/** The receiver's answer as stored (at most 4 KiB of text); escaped like every interpolated string. */
function answerBody(body: string | null): Html | string {
  if (body === null || body === "") return "";
  return html`<details class="answer"><summary>Answer body (${Buffer.byteLength(body)} bytes)</summary><pre>${body}</pre></details>`;
}

/** Where a delivery row goes: the task's callback_url, or one of the client's endpoints. */
const destinationOf = (e: EventRow | undefined): string => e?.endpointId ?? "callback";

/**
 * Why a pending event has not arrived yet: its last attempt's error or status (a receiver that refuses
 * connections reads "connection refused", not a bare "pending"), or nothing before its first attempt.
 */
function lastFailure(e: EventRow, lastAttempts: Map<string, AttemptRow>): Html | string {
  if (e.deliveryStatus !== "pending") return "";
  const a = lastAttempts.get(e.id);
  if (!a || a.outcome === "success") return "";
  const why = a.error ?? (a.statusCode !== null ? `the receiver answered ${a.statusCode}` : a.outcome);
  return html`<br><span class="muted last-failure">last attempt failed: ${why}</span>`;
}

function timelineRow(
  entry: TimelineEntry,
  now: number,
  rows: Map<string, EventRow>,
  lastAttempts: Map<string, AttemptRow>,
): Html {
  if (entry.kind === "created")
    return html`<tr><td>${time(entry.at)}</td><td>task created</td><td></td><td></td><td></td><td></td></tr>`;
  if (entry.kind === "event") {
    const e = entry.event;
    return html`<tr><td>${time(entry.at)}</td><td>event <strong>${e.type}</strong> <span class="muted destination">to ${destinationOf(e)}</span></td><td>${badge(e.deliveryStatus)}${nextAttempt(e, now)}${lastFailure(e, lastAttempts)}</td><td></td><td></td><td class="mono">${e.webhookId ?? e.id}</td></tr>`;
  }
  const a = entry.attempt;
  const row = rows.get(a.eventId);
  return html`<tr><td>${time(entry.at)}</td><td>attempt: ${a.eventType} <span class="muted destination">to ${destinationOf(row)}</span>${a.error ? html`<br><span class="muted">${a.error}</span>` : ""}${answerBody(a.responseBody)}</td>
<td>${badge(a.outcome)} ${a.statusCode ?? ""}</td><td>${a.latencyMs === null ? "—" : `${a.latencyMs} ms`}</td><td class="hide-sm">${a.url}</td><td class="mono">${row?.webhookId ?? a.eventId}</td></tr>`;
}

export function taskBody(
  d: TaskDetail,
  output: ShownOutput,
  previews: Preview[],
  now: number,
  csrf: string,
  message?: { kind: "ok" | "error"; text: string },
): Html {
  const { task, delivery } = d;
  const rows = new Map(d.events.map((e) => [e.id, e]));
  // The timeline is oldest first, so each event's last attempt is the one set last.
  const lastAttempts = new Map<string, AttemptRow>();
  for (const entry of d.timeline) if (entry.kind === "attempt") lastAttempts.set(entry.attempt.eventId, entry.attempt);
  const request = parse(task.requestJson) as Record<string, unknown> | string;
  const prompt =
    typeof request === "object" && request !== null && typeof request.prompt === "string" ? request.prompt : null;
  const error = parse(task.errorJson) as { code?: string; message?: string } | null;
  // Something to send it to: the task's callback_url, or an endpoint its events went to.
  const canRedeliver =
    d.events.length > 0 &&
    (task.callbackUrl !== null || d.events.some((e) => e.endpointId !== null && e.deliveryStatus !== "ended"));
  const canCancel = cancelRefusal(task, now) === null;
  return html`<p><a href="/dashboard">← Tasks</a></p>
<h1 class="mono">${task.id}</h1>
${message ? notice(message.kind, message.text) : ""}
<div class="actions">
  ${canRedeliver ? html`<form method="post" action="/dashboard/tasks/${task.id}/redeliver">${csrfField(csrf)}<button class="btn" type="submit">Redeliver</button></form>` : ""}
  ${canCancel ? html`<a class="btn danger" href="/dashboard/tasks/${task.id}/cancel">Cancel…</a>` : ""}
</div>
<section class="panel" aria-labelledby="h-summary"><h2 id="h-summary">Summary</h2><dl class="kv">
  <dt>Status</dt><dd>${badge(task.status)}</dd>
  <dt>Delivery</dt><dd>${badge(delivery.status)} ${delivery.attempts} attempt${delivery.attempts === 1 ? "" : "s"}${delivery.last_status_code !== null ? `, last answer ${delivery.last_status_code}` : ""}</dd>
  <dt>Type</dt><dd>${task.type}</dd><dt>Model</dt><dd>${task.model}</dd>
  <dt>Upstream id</dt><dd class="mono">${task.upstreamTaskId ?? "—"}</dd>
  <dt>Created</dt><dd>${time(task.createdAt)}</dd><dt>Completed</dt><dd>${time(task.completedAt)}</dd>
  <dt>Duration</dt><dd>${taskDuration(task, now)}</dd>
  <dt>Callback</dt><dd class="mono">${task.callbackUrl ?? "none (poll or use the events feed)"}</dd>
  <dt>Charged</dt><dd>${task.pointsCharged ?? "—"}</dd><dt>Refunded</dt><dd>${task.pointsRefunded ?? "—"}</dd>
  ${error ? html`<dt>Error</dt><dd><code>${error.code ?? ""}</code> ${error.message ?? ""}</dd>` : ""}
</dl></section>
<section aria-labelledby="h-request"><h2 id="h-request">Request</h2>
  ${prompt ? html`<p><strong>Prompt:</strong> ${prompt}</p>` : ""}
  <pre>${pretty(request)}</pre>
  <h3>Metadata</h3><pre>${task.metadataJson ? pretty(parse(task.metadataJson)) : "none"}</pre>
</section>
<section aria-labelledby="h-output"><h2 id="h-output">Output</h2>
  ${
    previews.length > 0
      ? html`<p class="muted">${previews.every((p) => p.origin === "'self'") ? "Previews are the copies in your bucket." : "Previews load from the upstream's host."}</p><div class="previews">${previews.map(
          (p) =>
            p.kind === "video"
              ? html`<video src="${p.url}" controls preload="metadata" aria-label="Video output"></video>`
              : html`<a href="${p.url}"><img src="${p.url}" alt="Image output of ${task.id}" loading="lazy"></a>`,
        )}</div>`
      : ""
  }
  ${outputText(task.id, output)}
  ${outputLinks(output, previews)}
</section>
<section aria-labelledby="h-timeline"><h2 id="h-timeline">Timeline</h2>
<div class="table-wrap"><table>
  <thead><tr><th scope="col">Time</th><th scope="col">What</th><th scope="col">Result</th><th scope="col">Latency</th><th scope="col" class="hide-sm">URL</th><th scope="col">webhook-id</th></tr></thead>
  <tbody>${d.timeline.map((entry) => timelineRow(entry, now, rows, lastAttempts))}</tbody>
</table></div></section>`;
}

/** A small output pretty-printed; a large one's first characters as stored, with where to read it whole. */
function outputText(id: string, output: ShownOutput): Html {
  if (output.kind === "none") return html`<p class="muted">No output yet.</p>`;
  if (output.kind === "parsed") return html`<pre>${pretty(output.value)}</pre>`;
  return html`<p class="muted">The output is ${output.chars.toLocaleString("en-US")} characters of JSON: its first ${output.start.length.toLocaleString("en-US")} are shown. Read it whole with <code>GET /openapi/v1/tasks/${id}</code>.</p><pre>${output.start}</pre>`;
}

/** Output URLs that are not previewed (http in sandbox mode, say) are still offered as links. */
function outputLinks(output: ShownOutput, previews: Preview[]): Html | string {
  const shown = new Set(previews.map((p) => p.url));
  const links: string[] = [];
  const offer = (v: unknown) => {
    if (typeof v === "string" && isWebUrl(v) && !shown.has(v) && links.length < 12) links.push(v);
  };
  if (output.kind === "text") for (const url of output.urls) offer(url);
  else if (output.kind === "parsed")
    JSON.stringify(output.value, (_k, v: unknown) => {
      offer(v);
      return v;
    });
  if (links.length === 0) return "";
  return html`<p>Output files: ${links.map((l) => html`<a href="${l}" rel="noreferrer">${l}</a> `)}</p>`;
}

/**
 * The confirm step of Cancel, a page of its own so it works without JavaScript (the CSP allows no
 * inline script): only this form carries `confirm=yes`, and the cancel action requires it.
 */
export function cancelConfirmBody(task: TaskRow, csrf: string): Html {
  return html`<p><a href="/dashboard/tasks/${task.id}">← Back to the task</a></p>
<h1>Cancel this task?</h1>
<section class="panel" aria-labelledby="h-confirm"><h2 id="h-confirm" class="mono">${task.id}</h2>
  <dl class="kv"><dt>Type</dt><dd>${task.type}</dd><dt>Model</dt><dd>${task.model}</dd><dt>Created</dt><dd>${time(task.createdAt)}</dd></dl>
  <p>It has not been submitted upstream, so nothing is charged. It ends as <strong>canceled</strong> and cannot be resumed; create a new task to run it later.</p>
  <form class="actions" method="post" action="/dashboard/tasks/${task.id}/cancel">${csrfField(csrf)}<input type="hidden" name="confirm" value="yes">
    <button class="btn danger" type="submit">Yes, cancel the task</button>
    <a class="btn secondary" href="/dashboard/tasks/${task.id}">No, keep it</a>
  </form>
</section>`;
}

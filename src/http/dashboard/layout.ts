import { html } from "hono/html";
import { ASSET_PATHS } from "./assets.js";

/** What hono's `html` tag returns: escaped markup (every interpolated string is escaped). */
export type Html = ReturnType<typeof html>;

export type Section = "tasks" | "webhooks" | "usage" | "storage" | "settings";

export interface PageOptions {
  title: string;
  /** The signed-in client, or null on the sign-in page (no navigation). */
  nav: { section: Section | null; clientName: string; csrf: string } | null;
  body: Html;
  /** Shown above the body on every signed-in page (failing callback hosts). */
  banner?: Html | string;
  /** Ask app.js to refresh the page's <main> while something is still moving (a running task). */
  refresh?: boolean;
  /** A task's event stream (with a stream token): app.js refreshes at once on each of its events. */
  stream?: string | undefined;
}

export function page(opts: PageOptions): Html {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
${opts.refresh ? html`<meta name="genrelay-refresh" content="3000">` : ""}
${opts.stream ? html`<meta name="genrelay-stream" content="${opts.stream}">` : ""}
<title>${opts.title} · genrelay</title>
<link rel="stylesheet" href="${ASSET_PATHS.css}">
<script src="${ASSET_PATHS.js}" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="/dashboard">genrelay</a>
  ${opts.nav ? navigation(opts.nav) : ""}
</header>
<main id="main" tabindex="-1">
${opts.banner ?? ""}
${opts.body}
</main>
</body>
</html>`;
}

function navigation(nav: NonNullable<PageOptions["nav"]>): Html {
  const link = (section: Section, href: string, label: string) =>
    html`<a href="${href}"${nav.section === section ? html` aria-current="page"` : ""}>${label}</a>`;
  return html`<nav aria-label="Dashboard">
    ${link("tasks", "/dashboard", "Tasks")}
    ${link("webhooks", "/dashboard/webhooks", "Webhooks")}
    ${link("usage", "/dashboard/usage", "Usage")}
    ${link("storage", "/dashboard/storage", "Storage")}
    ${link("settings", "/dashboard/settings", "Settings")}
  </nav>
  <form class="signout" method="post" action="/dashboard/sign-out">
    ${csrfField(nav.csrf)}
    <span class="who">${nav.clientName}</span>
    <button type="submit" class="link">Sign out</button>
  </form>`;
}

export const csrfField = (token: string) => html`<input type="hidden" name="csrf" value="${token}">`;

/** A message box; `role` makes screen readers announce it when the page loads after an action. */
export function notice(kind: "ok" | "error", text: string | Html): Html {
  return html`<div class="notice ${kind}" role="${kind === "error" ? "alert" : "status"}">${text}</div>`;
}

const pad = (n: number) => String(n).padStart(2, "0");

/** Server-rendered UTC time (no JS needed), with the exact instant in `datetime`. */
export function time(ms: number | null): Html | string {
  if (ms === null) return "—";
  const d = new Date(ms);
  const text = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
  return html`<time datetime="${d.toISOString()}">${text} UTC</time>`;
}

export function duration(ms: number | null): string {
  if (ms === null || ms < 0) return "—";
  if (ms < 1_000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  const s = Math.round(ms / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3_600)} h ${Math.floor((s % 3_600) / 60)} min`;
}

/** A status shown as a word (never colour alone) with a class for its colour. */
export const badge = (value: string) => html`<span class="badge b-${value.replace(/[^a-z-]/g, "")}">${value}</span>`;

import type { Context } from "hono";
import { html } from "hono/html";
import type { DeliveryService } from "../../services/deliveries.js";
import type { ServiceDeps } from "../../services/deps.js";
import type { ApiError } from "../../services/errors.js";
import { page, type Html, type Section } from "./layout.js";
import type { DashEnv } from "./session.js";
import { failingBanner, type HostHealth } from "./views-webhooks.js";
import { sandboxBanner } from "./views-settings.js";

export interface DashboardDeps extends ServiceDeps {
  deliveries: DeliveryService;
  hostHealth?: HostHealth;
}

/**
 * The one policy for every dashboard page: only the relay's own scripts, styles and images, plus,
 * on a task page, the exact https origins of that task's output previews (the upstream's file host).
 */
export function contentSecurityPolicy(mediaOrigins: string[] = []): string {
  const media = [...new Set(["'self'", ...mediaOrigins])].join(" ");
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src ${media}`,
    `media-src ${media}`,
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; ");
}

export function securityHeaders(c: Context, mediaOrigins: string[] = []): void {
  c.header("Content-Security-Policy", contentSecurityPolicy(mediaOrigins));
  c.header("X-Content-Type-Options", "nosniff");
  c.header("X-Frame-Options", "DENY");
  c.header("Referrer-Policy", "no-referrer");
  // Pages can show a freshly rotated secret; nothing here should sit in a shared cache or history.
  c.header("Cache-Control", "no-store");
}

/** A signed-in page; every one carries the banner of the client's callback hosts answering no 2xx. */
export async function render(
  c: Context<DashEnv>,
  deps: DashboardDeps,
  opts: {
    title: string;
    section: Section;
    body: Html;
    status?: number;
    refresh?: boolean;
    mediaOrigins?: string[];
    stream?: string;
  },
): Promise<Response> {
  const failing = await deps.store.keyHealth.failingOf(c.get("client").id);
  securityHeaders(c, opts.mediaOrigins);
  const body = page({
    title: opts.title,
    nav: { section: opts.section, clientName: c.get("client").name, csrf: c.get("session").csrfToken },
    banner: html`${deps.config.upstreamBaseUrl ? "" : sandboxBanner()}${failingBanner(failing, deps.clock.now())}`,
    body: opts.body,
    refresh: opts.refresh ?? false,
    stream: opts.stream,
  });
  return c.html(body, (opts.status ?? 200) as 200);
}

/** A service's refusal as one line for a form's error box: its message and each field's problem. */
export function refusalText(err: ApiError): string {
  const details = Array.isArray(err.details)
    ? (err.details as Array<{ field: string; message: string }>).map((d) => `${d.field}: ${d.message}`).join("; ")
    : "";
  return details && !err.message.includes(details) ? `${err.message} ${details}` : err.message;
}

/** A page for an error outside any form (unknown task, expired session on a POST). */
export function errorPage(c: Context, status: number, message: string): Response | Promise<Response> {
  securityHeaders(c);
  const body = page({
    title: status === 404 ? "Not found" : "Error",
    nav: null,
    body: html`<h1>${status === 404 ? "Not found" : "Something went wrong"}</h1><p class="panel" role="alert">${message}</p><p><a href="/dashboard">Back to the dashboard</a></p>`,
  });
  return c.html(body, status as 200);
}

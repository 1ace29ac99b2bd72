import { html } from "hono/html";
import type { Html } from "./layout.js";

/** On every signed-in page in sandbox mode: nothing here is a real generation (section 14). */
export function sandboxBanner(): Html {
  return html`<section class="notice error sandbox-banner" role="status" aria-label="Sandbox mode"><strong>Sandbox mode:</strong> no UPSTREAM_BASE_URL is set, so the built-in simulator answers and every result here is simulated.</section>`;
}

import { html } from "hono/html";
import { notice, page, type Html } from "./layout.js";

/** The sign-in form. The key goes only in a POST body, never in a URL or back into the page. */
export function signInPage(csrf: string, error?: string): Html {
  return page({
    title: "Sign in",
    nav: null,
    body: html`<div class="signin">
  <h1>Sign in to the dashboard</h1>
  ${error ? notice("error", error) : ""}
  <form class="panel" method="post" action="/dashboard/sign-in" autocomplete="off">
    <input type="hidden" name="csrf" value="${csrf}">
    <label for="api_key">API key</label>
    <input id="api_key" name="api_key" type="password" required autocomplete="current-password" spellcheck="false" aria-describedby="api_key_help">
    <p id="api_key_help" class="muted">Your client's relay API key (<code>grk_…</code>), from <code>npm run cli -- clients create</code>.</p>
    <button class="btn" type="submit">Sign in</button>
  </form>
</div>`,
  });
}

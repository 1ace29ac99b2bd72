import type { Context, Hono, MiddlewareHandler } from "hono";
import { ApiError } from "../../services/errors.js";
import {
  changeDefaultHeader,
  getWebhookSettings,
  updateWebhookSettings,
  type WebhookSettingsView,
} from "../../services/webhook-settings.js";
import { refusalText, render, type DashboardDeps } from "./render.js";
import type { DashEnv } from "./session.js";
import { settingsBody, type SettingsPageView } from "./views-settings.js";

/**
 * /dashboard/settings: the client's webhook defaults through the same service as
 * GET/PUT /openapi/v1/webhooks/settings (its refusals shown with the API's status and details).
 */
export function registerSettingsPages(app: Hono<DashEnv>, deps: DashboardDeps, auth: MiddlewareHandler<DashEnv>): void {
  const show = async (c: Context<DashEnv>, extra: Partial<SettingsPageView> = {}, status = 200) => {
    const view: SettingsPageView = {
      csrf: c.get("session").csrfToken,
      settings: await getWebhookSettings(deps, c.get("client").id),
      sealed: deps.config.encryptionKey !== null,
      ...extra,
    };
    return render(c, deps, { title: "Webhook settings", section: "settings", body: settingsBody(view), status });
  };
  const fields = async (c: Context<DashEnv>) => {
    const form = await c.req.parseBody();
    return (name: string) => (typeof form[name] === "string" ? (form[name] as string) : "");
  };
  /** Runs a change; a refusal is shown on the page (never echoing a header value). */
  const change = async (
    c: Context<DashEnv>,
    extra: Partial<SettingsPageView>,
    saved: (now: WebhookSettingsView) => string,
    run: () => Promise<WebhookSettingsView>,
  ) => {
    try {
      return show(c, { saved: saved(await run()) });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      return show(c, { ...extra, error: refusalText(err) }, err.status);
    }
  };
  const clientId = (c: Context<DashEnv>) => c.get("client").id;

  app.get("/settings", auth, (c) => show(c));

  app.post("/settings/notification", auth, async (c) => {
    const url = (await fields(c))("notification_url").trim();
    return change(
      c,
      { typedUrl: url },
      (now) => (now.notification_url ? "Notification URL saved." : "Notification URL removed."),
      () => updateWebhookSettings(deps, clientId(c), { notification_url: url === "" ? null : url }),
    );
  });

  app.post("/settings/headers", auth, async (c) => {
    const field = await fields(c);
    const name = field("name").trim();
    // The value is taken as typed: a header token with a stray space is refused, not silently changed.
    return change(
      c,
      { typedName: name },
      () => `Header ${name.toLowerCase()} saved. Its value is not shown again.`,
      () => changeDefaultHeader(deps, clientId(c), name, field("value")),
    );
  });

  app.post("/settings/headers/remove", auth, async (c) => {
    const name = (await fields(c))("name").trim();
    return change(
      c,
      {},
      () => `Header ${name.toLowerCase()} removed.`,
      () => changeDefaultHeader(deps, clientId(c), name, null),
    );
  });

  app.post("/settings/headers/clear", auth, (c) =>
    change(
      c,
      {},
      () => "Every default callback header removed.",
      () => updateWebhookSettings(deps, clientId(c), { callback_headers: null }),
    ),
  );

  app.post("/settings/signature", auth, async (c) => {
    const signature = (await fields(c))("signature");
    if (signature !== "hmac" && signature !== "ed25519") return show(c, { error: "Choose hmac or ed25519." }, 422);
    return change(
      c,
      {},
      (now) =>
        now.signature === "ed25519"
          ? "Webhooks are now signed with Ed25519 (v1a); verify them with the public key below."
          : "Webhooks are now signed with HMAC (v1) and your whsec_ secret.",
      () => updateWebhookSettings(deps, clientId(c), { signature }),
    );
  });
}

import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { ApiError } from "../../services/errors.js";
import { isDatabaseUnavailable } from "../../store/database-health.js";
import { isUnstorableText } from "../errors.js";
import { signIn, signOut } from "../../services/dashboard.js";
import { registerAssets } from "./assets.js";
import { errorPage, securityHeaders, type DashboardDeps } from "./render.js";
import { registerTaskPages, tasksPage } from "./routes-tasks.js";
import { registerWebhookPages } from "./routes-webhooks.js";
import { registerStoragePages } from "./routes-storage.js";
import { registerSettingsPages } from "./routes-settings.js";
import {
  clearSessionCookie,
  clientAddress,
  currentSession,
  requireSession,
  setSessionCookie,
  SIGNIN_COOKIE,
  SignInLimiter,
  signInToken,
  tokensEqual,
  type DashEnv,
} from "./session.js";
import { signInPage } from "./views-signin.js";
import { getCookie } from "hono/cookie";

/** The web dashboard, mounted at /dashboard: server-rendered pages over the same services as the API. */
export function createDashboard(deps: DashboardDeps): Hono<DashEnv> {
  const app = new Hono<DashEnv>();
  const limiter = new SignInLimiter(deps.clock);
  const refuse = (c: Parameters<typeof errorPage>[0], status: 401 | 403, message: string) =>
    errorPage(c, status, message);
  const auth = requireSession(deps, refuse);

  // Forms carry a URL or a date, never much: a small limit keeps body parsing cheap.
  app.use("*", async (c, next) => {
    if (c.req.method !== "POST") return next();
    return bodyLimit({ maxSize: 64 * 1024, onError: (c2) => errorPage(c2, 413, "The form is too large.") })(c, next);
  });
  app.onError((err, c) => {
    if (err instanceof ApiError) return errorPage(c, err.status, err.message);
    // An id with NUL names no page; a database that cannot serve now is not a bug (docs/contract.md, "Intake" and "Acknowledged means stored").
    if (isUnstorableText(err)) return errorPage(c, 404, "There is no such page.");
    if (isDatabaseUnavailable(err)) {
      deps.database?.failed(err, `${c.req.method} ${c.req.path}`);
      c.header("Retry-After", "5");
      return errorPage(c, 503, "The relay cannot reach its storage right now. Retry in a few seconds.");
    }
    deps.logger.error({ err, request_id: c.get("requestId") }, "dashboard error");
    return errorPage(c, 500, "Something went wrong on our side.");
  });
  app.notFound((c) => errorPage(c, 404, "There is no such page."));

  registerAssets(app);

  app.get(
    "/",
    async (c, next) => {
      const found = await currentSession(c, deps);
      if (found) return auth(c, next);
      securityHeaders(c);
      return c.html(signInPage(signInToken(c, deps)));
    },
    tasksPage(deps),
  );

  app.post("/sign-in", async (c) => {
    const ip = clientAddress(c);
    const form = await c.req.parseBody();
    if (!tokensEqual(typeof form.csrf === "string" ? form.csrf : undefined, getCookie(c, SIGNIN_COOKIE))) {
      return errorPage(
        c,
        403,
        "The sign-in form has expired or did not come from the dashboard. Reload it and try again.",
      );
    }
    const signedIn = typeof form.api_key === "string" ? await signIn(deps, form.api_key.trim()) : null;
    securityHeaders(c);
    if (!signedIn) {
      // Failures are slowed per address, but a valid key always signs in (docs/contract.md, "Intake"): behind a
      // shared proxy one address is everyone, so a lock-out would lock out every user.
      const wait = limiter.retryAfter(ip);
      if (wait > 0) {
        c.header("Retry-After", String(wait));
        return c.html(
          signInPage(
            signInToken(c, deps),
            `Too many failed sign-ins from your address. Try again in ${Math.ceil(wait / 60)} min (a valid key still signs in).`,
          ),
          429,
        );
      }
      limiter.fail(ip);
      return c.html(signInPage(signInToken(c, deps), "That API key is not valid, or its client was revoked."), 401);
    }
    // A fresh token on every sign-in: an old cookie (perhaps planted) never becomes a signed-in session.
    const previous = await currentSession(c, deps);
    if (previous) await signOut(deps, previous.token);
    setSessionCookie(c, deps, signedIn.token);
    return c.redirect("/dashboard", 303);
  });

  app.post("/sign-out", auth, async (c) => {
    await signOut(deps, c.get("sessionToken"));
    clearSessionCookie(c, deps);
    return c.redirect("/dashboard", 303);
  });

  registerTaskPages(app, deps, auth);
  registerWebhookPages(app, deps, auth);
  registerStoragePages(app, deps, auth);
  registerSettingsPages(app, deps, auth);
  return app;
}

import type { Context, MiddlewareHandler } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { Clock } from "../../clock.js";
import type { ClientRow, SessionRow } from "../../store/rows.js";
import { resolveSession, SESSION_TTL_MS } from "../../services/dashboard.js";
import type { ServiceDeps } from "../../services/deps.js";
import { LRUCache } from "lru-cache";
import { slidingVerdict } from "../../store/rate-window.js";
import { socketAddress } from "../client-address.js";

export interface DashEnv {
  Variables: {
    requestId: string;
    client: ClientRow;
    session: SessionRow;
    /** The raw cookie token, for sign-out. */
    sessionToken: string;
  };
}

export const SESSION_COOKIE = "genrelay_session";
/** Sign-in has no session yet: a double-submit token (cookie = form field) protects its form. */
export const SIGNIN_COOKIE = "genrelay_signin";
const COOKIE_PATH = "/dashboard";

/** https requests (or a relay published at an https address) get Secure cookies; plain http cannot. */
function isSecure(c: Context, deps: ServiceDeps): boolean {
  return new URL(c.req.url).protocol === "https:" || deps.config.publicBaseUrl?.startsWith("https:") === true;
}

const cookieOptions = (c: Context, deps: ServiceDeps, maxAgeSeconds: number) => ({
  path: COOKIE_PATH,
  httpOnly: true,
  sameSite: "Strict" as const,
  secure: isSecure(c, deps),
  maxAge: maxAgeSeconds,
});

export function setSessionCookie(c: Context, deps: ServiceDeps, token: string): void {
  setCookie(c, SESSION_COOKIE, token, cookieOptions(c, deps, Math.floor(SESSION_TTL_MS / 1000)));
  deleteCookie(c, SIGNIN_COOKIE, { path: COOKIE_PATH, secure: isSecure(c, deps) });
}

export function clearSessionCookie(c: Context, deps: ServiceDeps): void {
  deleteCookie(c, SESSION_COOKIE, { path: COOKIE_PATH, secure: isSecure(c, deps), httpOnly: true, sameSite: "Strict" });
}

/** The sign-in form's token: reuses the cookie's when there is one, so two open tabs both work. */
export function signInToken(c: Context, deps: ServiceDeps): string {
  const existing = getCookie(c, SIGNIN_COOKIE);
  const token = existing && /^[\w-]{43}$/.test(existing) ? existing : randomBytes(32).toString("base64url");
  setCookie(c, SIGNIN_COOKIE, token, cookieOptions(c, deps, 60 * 60));
  return token;
}

export function tokensEqual(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The session of this request, or null; resolveSession also refuses a revoked client. */
export async function currentSession(
  c: Context,
  deps: ServiceDeps,
): Promise<{ session: SessionRow; client: ClientRow; token: string } | null> {
  const token = getCookie(c, SESSION_COOKIE);
  if (!token) return null;
  const found = await resolveSession(deps, token);
  return found ? { ...found, token } : null;
}

/**
 * Pages need a live session: a GET without one goes to the sign-in page (303), a POST is refused.
 * Every POST must carry the session's CSRF token in its `csrf` field, else 403.
 */
export function requireSession(
  deps: ServiceDeps,
  refuse: (c: Context, status: 401 | 403, message: string) => Response | Promise<Response>,
): MiddlewareHandler<DashEnv> {
  return async (c, next) => {
    const found = await currentSession(c, deps);
    if (!found) {
      if (c.req.method === "GET" || c.req.method === "HEAD") return c.redirect("/dashboard", 303);
      return refuse(c, 401, "Your session has ended. Sign in again.");
    }
    if (c.req.method === "POST") {
      const form = await c.req.parseBody();
      const sent = typeof form.csrf === "string" ? form.csrf : undefined;
      if (!tokensEqual(sent, found.session.csrfToken))
        return refuse(
          c,
          403,
          "This form has expired or did not come from the dashboard. Reload the page and try again.",
        );
    }
    c.set("session", found.session);
    c.set("client", found.client);
    c.set("sessionToken", found.token);
    await next();
  };
}

/**
 * Failed sign-ins per IP address, in memory: at most `max` in a sliding `windowMs`. The address is
 * the socket's; X-Forwarded-For is not trusted (anyone can send it, and would then pick a fresh
 * bucket for every guess). Keys are 256 bits, so this only keeps a typo-loop or a scanner polite.
 */
export class SignInLimiter {
  /** Bounded memory under a spray from many addresses: past 10,000 the least recently failing goes. */
  private readonly failures = new LRUCache<string, number[]>({ max: 10_000 });
  constructor(
    private readonly clock: Clock,
    private readonly max = 10,
    private readonly windowMs = 15 * 60 * 1000,
  ) {}

  /** Seconds until the next attempt is allowed, or 0. */
  retryAfter(ip: string): number {
    const now = this.clock.now();
    const verdict = slidingVerdict(this.recent(ip), this.max, this.windowMs, now);
    return verdict.allowed ? 0 : Math.max(1, Math.ceil((verdict.retryAt - now) / 1000));
  }

  fail(ip: string): void {
    const recent = this.recent(ip);
    recent.push(this.clock.now());
    this.failures.set(ip, recent);
  }

  private recent(ip: string): number[] {
    const since = this.clock.now() - this.windowMs;
    // peek: only a failure makes an address recent, not a look at it.
    return (this.failures.peek(ip) ?? []).filter((t) => t > since);
  }
}

export function clientAddress(c: Context): string {
  return socketAddress(c) ?? "unknown";
}

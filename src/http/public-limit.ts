import { LRUCache } from "lru-cache";
import type { Clock } from "../clock.js";
import { slidingVerdict } from "../store/rate-window.js";
import { addressBucket, socketAddress } from "./client-address.js";
import { errorResponse } from "./errors.js";
import type { Gate } from "./middleware.js";

/**
 * Requests one address may make without an API key in any PUBLIC_WINDOW_MS (docs/public-routes.md):
 * 20 a second on average, bursts of 200. A receiver fetching JWKS or a low-code tool following file
 * links stays far below it; a flood is refused before it costs a database read.
 */
export const PUBLIC_REQUESTS_PER_WINDOW = 200;
export const PUBLIC_WINDOW_MS = 10_000;

/**
 * Paths exempt by name: the probes (an orchestrator polls them from one address, and refusing it
 * would restart a healthy relay under someone else's flood) and the dashboard, which authenticates
 * with its own sessions and slows failed sign-ins per address itself, and whose contract is that a
 * valid key always signs in.
 */
export const PUBLIC_LIMIT_EXEMPT = ["/healthz", "/readyz"] as const;
const EXEMPT_PREFIX = "/dashboard";

const isExempt = (path: string) =>
  (PUBLIC_LIMIT_EXEMPT as readonly string[]).includes(path) ||
  path === EXEMPT_PREFIX ||
  path.startsWith(`${EXEMPT_PREFIX}/`);

/**
 * Counts requests per address in a sliding window, in memory (each instance counts its own: a
 * flood is refused where it lands). Refused requests are not counted, so an address that keeps
 * flooding is let in again as its counted requests leave the window. Bounded under a spray from
 * many addresses: past `addresses` the least recently seen goes.
 */
export class AddressLimiter {
  private readonly hits: LRUCache<string, number[]>;

  constructor(
    private readonly clock: Pick<Clock, "now">,
    private readonly limit = PUBLIC_REQUESTS_PER_WINDOW,
    private readonly windowMs = PUBLIC_WINDOW_MS,
    addresses = 10_000,
  ) {
    this.hits = new LRUCache({ max: addresses });
  }

  /** Counts one request of `address` now and answers 0, or the seconds until one more fits (not counted). */
  take(address: string): number {
    const now = this.clock.now();
    const bucket = addressBucket(address);
    let counted = this.hits.get(bucket);
    if (!counted) this.hits.set(bucket, (counted = []));
    // Oldest first: drop what has left the window from the front.
    let gone = 0;
    while (gone < counted.length && counted[gone]! <= now - this.windowMs) gone++;
    if (gone > 0) counted.splice(0, gone);
    const verdict = slidingVerdict(counted, this.limit, this.windowMs, now);
    if (!verdict.allowed) return Math.max(1, Math.ceil((verdict.retryAt - now) / 1000));
    counted.push(now);
    return 0;
  }
}

/**
 * The per-address limit on every request the app answers without an authenticated client: it runs
 * after the API-key middleware, so whatever route is mounted without one (the JWKS, file links,
 * stream-token reads, /openapi.json, /docs, /metrics, an unknown path, a route added tomorrow) is
 * limited without being listed; only PUBLIC_LIMIT_EXEMPT and the dashboard opt out, by name. A
 * request with a valid key is never counted, so a victim behind the flooder's address keeps working.
 * A request made in process (no socket) is not counted.
 */
export function publicRateLimit(limiter: AddressLimiter): Gate {
  return (c) => {
    if (c.get("client") || isExempt(c.req.path)) return undefined;
    const address = socketAddress(c);
    const wait = address === undefined ? 0 : limiter.take(address);
    if (wait === 0) return undefined;
    return errorResponse(
      c,
      "rate_limit",
      `Too many requests without an API key from this address: at most ${PUBLIC_REQUESTS_PER_WINDOW} every ${PUBLIC_WINDOW_MS / 1000} seconds. Retry after ${wait} s.`,
      undefined,
      { "Retry-After": String(wait) },
    );
  };
}

/**
 * The unit of receiver protection: a destination host, `hostname:port` of a callback URL with the
 * scheme's default port filled in (so `https://a.test/x` and `https://a.test:443/y` are one host,
 * and `http://a.test` is another: port 80). The concurrency cap and the circuit breaker count per
 * destination host, not per client: two clients pointing at one receiver share its protection.
 */

const DEFAULT_PORTS: Record<string, string> = { "http:": "80", "https:": "443" };

/** Callback URLs repeat (one per client, mostly), and the dispatcher asks for their host on every claim. */
const hostCache = new Map<string, string>();
const HOST_CACHE_SIZE = 1_000;

/** `hostname:port` of a callback URL; the whole string when it does not parse (it never reaches a socket then). */
export function destinationHost(url: string): string {
  const cached = hostCache.get(url);
  if (cached !== undefined) return cached;
  let host: string;
  try {
    const parsed = new URL(url);
    host = `${parsed.hostname}:${parsed.port || DEFAULT_PORTS[parsed.protocol] || ""}`;
  } catch {
    host = url;
  }
  if (hostCache.size >= HOST_CACHE_SIZE) hostCache.delete(hostCache.keys().next().value!);
  hostCache.set(url, host);
  return host;
}

/**
 * The prefixes a stored callback URL of this host starts with, so SQL can filter on the stored
 * column without parsing URLs. Sound because intake stores callback URLs normalised by the WHATWG
 * parser (`URL.href`: lower-case host, default port dropped, always a `/` after the authority);
 * the dispatcher still checks each claimed event's host in code, so a URL stored in another spelling
 * is at worst claimed and released, never sent past the cap.
 */
export function hostUrlPrefixes(host: string): string[] {
  const colon = host.lastIndexOf(":");
  if (colon <= 0) return [];
  const hostname = host.slice(0, colon);
  const port = host.slice(colon + 1);
  return Object.entries(DEFAULT_PORTS).map(([scheme, defaultPort]) =>
    port === defaultPort ? `${scheme}//${hostname}/` : `${scheme}//${hostname}:${port}/`,
  );
}

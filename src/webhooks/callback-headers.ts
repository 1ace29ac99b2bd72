import { openSecret, sealSecret } from "../crypto.js";

/**
 * Callback headers as every attempt sends them (docs/contract.md, "Callback headers"): the names never
 * sent, and the sealed form they are stored in. What intake accepts is services/callback-headers.ts.
 */

/**
 * Names a callback header never has: the hop-by-hop headers (RFC 9110 §7.6.1, and the older
 * Keep-Alive, Proxy-* and Trailers), those the HTTP client computes or refuses to send (Host,
 * Content-*, Expect: undici throws on it, so every attempt would fail and count against the host's
 * breaker), and the relay's own (User-Agent, Webhook-*). Outgoing headers drop them too, for rows
 * stored before a name was added here.
 */
export const RESERVED_HEADERS = [
  "host",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "trailers",
  "transfer-encoding",
  "upgrade",
  "expect",
  "http2-settings",
  "user-agent",
] as const;
export const RESERVED_HEADER_PREFIXES = ["content-", "proxy-", "webhook-"] as const;
export const RESERVED_HEADER_MESSAGE =
  "is set by the relay or by the connection (hop-by-hop) and cannot be sent as a callback header: never host, connection, keep-alive, proxy-*, te, trailer, transfer-encoding, upgrade, expect, content-*, user-agent or webhook-*";
const RESERVED = new Set<string>(RESERVED_HEADERS);

export function isReservedHeader(name: string): boolean {
  const n = name.toLowerCase();
  return RESERVED.has(n) || RESERVED_HEADER_PREFIXES.some((p) => n.startsWith(p));
}

/** The stored form of a header set: sealed JSON with lower-case names, or null when there is none. */
export function sealHeaders(headers: Record<string, string> | null | undefined, key: Buffer | null): string | null {
  if (!headers || Object.keys(headers).length === 0) return null;
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  return sealSecret(JSON.stringify(lower), key);
}

/** The plain headers of a stored set (empty when none). */
export function openHeaders(stored: string | null | undefined, key: Buffer | null): Record<string, string> {
  if (!stored) return {};
  return JSON.parse(openSecret(stored, key)) as Record<string, string>;
}

/** What may be shown of a stored set: its names. Read without opening it when it is plain JSON. */
export function headerNames(stored: string | null | undefined, key: Buffer | null): string[] {
  if (!stored) return [];
  try {
    return Object.keys(openHeaders(stored, key)).sort();
  } catch {
    return [];
  }
}

import type { FieldProblem } from "./errors.js";
import { openSecret, sealSecret } from "./clients.js";

/**
 * Callback headers (docs/contract.md, "Callback headers"): a token a Zapier, Make or n8n catch hook checks, since those cannot
 * verify an HMAC. A task's own and a client's defaults are stored sealed (RELAY_ENCRYPTION_KEY when
 * set, like webhook secrets) and never shown: reads, the feed, logs, the CLI and the dashboard see
 * names only. They are sent with every attempt; the relay's own headers always win.
 */
export const MAX_CALLBACK_HEADERS = 8;
/** Exported, with the value rule and the reserved names, for the request schemas that publish them (src/http/schemas.ts). */
export const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$/;
/** Visible ASCII, with spaces allowed inside (`Bearer abc`), never at either end. */
export const HEADER_VALUE = /^[\x21-\x7e](?:[\x20-\x7e]{0,1022}[\x21-\x7e])?$/;
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

/** Every problem of a `callback_headers` value, each naming the header (never its value). */
export function callbackHeaderProblems(value: unknown, field = "callback_headers"): FieldProblem[] {
  if (value === undefined || value === null) return [];
  if (typeof value !== "object" || Array.isArray(value))
    return [{ field, message: "must be an object of header names to string values" }];
  const entries = Object.entries(value as Record<string, unknown>);
  const problems: FieldProblem[] = [];
  if (entries.length > MAX_CALLBACK_HEADERS)
    problems.push({ field, message: `at most ${MAX_CALLBACK_HEADERS} headers` });
  const seen = new Set<string>();
  for (const [name, v] of entries) {
    const at = `${field}.${name.length > 64 ? `${name.slice(0, 64)}…` : name}`;
    if (!HEADER_NAME.test(name))
      problems.push({
        field: at,
        message: "a header name is an HTTP token (letters, digits, !#$%&'*+-.^_`|~) of at most 64 characters",
      });
    else if (isReservedHeader(name)) {
      problems.push({ field: at, message: RESERVED_HEADER_MESSAGE });
    } else if (seen.has(name.toLowerCase()))
      problems.push({ field: at, message: "is given twice (header names are case-insensitive)" });
    seen.add(name.toLowerCase());
    if (typeof v !== "string") problems.push({ field: at, message: "must be a string" });
    else if (!HEADER_VALUE.test(v))
      problems.push({ field: at, message: "must be 1 to 1024 visible ASCII characters (spaces only inside)" });
  }
  return problems;
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

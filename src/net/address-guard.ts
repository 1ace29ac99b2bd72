import { promises as dns, type LookupAddress } from "node:dns";
import { isIP, isIPv6 } from "node:net";
import ipaddr from "ipaddr.js";
import { LRUCache } from "lru-cache";

/**
 * SSRF guard for webhook delivery (docs/contract.md, "What must never happen": no webhook to a private or
 * loopback address unless allowed, after DNS resolution, on IPv6 and
 * IPv4-mapped forms too). Three layers:
 *  1. validateCallbackUrl at intake (and again before each send): scheme,
 *     credentials, literal IPs in any spelling, localhost-like names.
 *  2. The sender re-checks literal IPs: net.connect never calls `lookup` for
 *     an IP literal, so layer 3 would not see them.
 *  3. createGuardedLookup, installed as the socket's DNS lookup: every
 *     resolved address is vetted and the socket connects only to vetted
 *     addresses, which defeats DNS rebinding (no second, unchecked resolution).
 */

export type AddressVerdict = { allowed: true } | { allowed: false; reason: string };

const cidr4 = (text: string): [ipaddr.IPv4, number] => ipaddr.IPv4.parseCIDR(text);
const cidr6 = (text: string): [ipaddr.IPv6, number] => ipaddr.IPv6.parseCIDR(text);

// IANA special-purpose registries, narrowed to what can never be a public
// webhook receiver. Order matters only for the reason given (first match wins).
const IPV4_BLOCKED: Array<[[ipaddr.IPv4, number], string]> = [
  [cidr4("0.0.0.0/8"), "unspecified (0.0.0.0/8)"], // Linux connects 0.0.0.0 to the local host
  [cidr4("10.0.0.0/8"), "private (RFC 1918)"],
  [cidr4("100.64.0.0/10"), "cgnat"],
  [cidr4("127.0.0.0/8"), "loopback"],
  [cidr4("169.254.0.0/16"), "link-local"], // includes the cloud metadata address 169.254.169.254
  [cidr4("172.16.0.0/12"), "private (RFC 1918)"],
  [cidr4("192.0.0.0/24"), "IETF protocol assignments"],
  [cidr4("192.0.2.0/24"), "documentation"],
  [cidr4("192.88.99.0/24"), "6to4 relay anycast (deprecated)"],
  [cidr4("192.168.0.0/16"), "private (RFC 1918)"],
  [cidr4("198.18.0.0/15"), "benchmarking"],
  [cidr4("198.51.100.0/24"), "documentation"],
  [cidr4("203.0.113.0/24"), "documentation"],
  [cidr4("224.0.0.0/4"), "multicast"],
  [cidr4("255.255.255.255/32"), "broadcast"],
  [cidr4("240.0.0.0/4"), "reserved (class E)"],
];

// IPv6 forms that carry an IPv4 address: judged by the embedded address,
// because the packet ends up there (mapped: the host's own IPv4 stack; NAT64
// and 6to4: a translator or relay).
const IPV6_EMBEDDING: Array<[[ipaddr.IPv6, number], string, (parts: number[]) => [number, number]]> = [
  [cidr6("::ffff:0:0/96"), "ipv4-mapped", (p) => [p[6] ?? 0, p[7] ?? 0]],
  [cidr6("64:ff9b::/96"), "nat64", (p) => [p[6] ?? 0, p[7] ?? 0]],
  [cidr6("2002::/16"), "6to4", (p) => [p[1] ?? 0, p[2] ?? 0]],
];

const IPV6_BLOCKED: Array<[[ipaddr.IPv6, number], string]> = [
  [cidr6("::/128"), "unspecified"], // like 0.0.0.0, reaches the local host on Linux
  [cidr6("::1/128"), "loopback"],
  [cidr6("::/96"), "ipv4-compatible (deprecated)"],
  [cidr6("64:ff9b:1::/48"), "nat64 local-use"],
  [cidr6("100::/64"), "discard-only"],
  [cidr6("2001::/32"), "teredo"], // the client address is obfuscated inside; no receiver lives there
  [cidr6("2001::/23"), "IETF protocol assignments"],
  [cidr6("2001:db8::/32"), "documentation"],
  [cidr6("3fff::/20"), "documentation"],
  [cidr6("fc00::/7"), "unique-local"],
  [cidr6("fe80::/10"), "link-local"],
  [cidr6("fec0::/10"), "site-local (deprecated)"],
  [cidr6("ff00::/8"), "multicast"],
];
const IPV6_GLOBAL_UNICAST = cidr6("2000::/3");

function checkIpv4(addr: ipaddr.IPv4): AddressVerdict {
  for (const [range, reason] of IPV4_BLOCKED) if (addr.match(range)) return { allowed: false, reason };
  return { allowed: true };
}

function checkIpv6(addr: ipaddr.IPv6): AddressVerdict {
  if (addr.zoneId) return { allowed: false, reason: "scoped (zone id) address" };
  for (const [range, label, embedded] of IPV6_EMBEDDING) {
    if (!addr.match(range)) continue;
    const [hi, lo] = embedded(addr.parts);
    const inner = checkIpv4(new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]));
    return inner.allowed ? inner : { allowed: false, reason: `${label} ${inner.reason}` };
  }
  for (const [range, reason] of IPV6_BLOCKED) if (addr.match(range)) return { allowed: false, reason };
  if (!addr.match(IPV6_GLOBAL_UNICAST)) return { allowed: false, reason: "not global unicast" };
  return { allowed: true };
}

/** Public unicast only. Accepts any spelling parseHostAsIp accepts. */
export function checkAddress(ip: string): AddressVerdict {
  const canonical = parseHostAsIp(ip);
  if (canonical === null) return { allowed: false, reason: "not an IP address" };
  const addr = ipaddr.parse(canonical);
  return addr.kind() === "ipv4" ? checkIpv4(addr as ipaddr.IPv4) : checkIpv6(addr as ipaddr.IPv6);
}

function canonicalIpv6(text: string): string | null {
  const zoneAt = text.indexOf("%");
  const address = zoneAt === -1 ? text : text.slice(0, zoneAt);
  const zone = zoneAt === -1 ? "" : text.slice(zoneAt);
  if (!isIPv6(address)) return null; // inet_pton's grammar, as the socket will read it
  // ipaddr.js reads the deprecated "::a.b.c.d" as IPv4-mapped (::ffff:a.b.c.d);
  // inet_pton and WHATWG read it as IPv4-compatible (::a.b:c.d). The URL parser
  // canonicalises first so that ipaddr.js only ever sees hex groups.
  const addr = ipaddr.IPv6.parse(new URL(`http://[${address}]/`).hostname.slice(1, -1));
  // Mixed notation for mapped addresses (RFC 5952 §5) reads better in error messages.
  if (addr.isIPv4MappedAddress()) return `::ffff:${addr.toIPv4Address().toString()}${zone}`;
  return `${addr.toString()}${zone}`;
}

/**
 * The canonical IP when `host` is an IP literal in any spelling, else null.
 * IPv4 goes through the WHATWG host parser (the one `new URL()` and undici
 * use), so decimal `2130706433`, hex `0x7f000001`, octal `0177.0.0.1`, short
 * `127.1`, a trailing dot, percent-encoding and full-width digits all come out
 * as the address that would actually be dialled.
 */
export function parseHostAsIp(host: string): string | null {
  if (host.startsWith("[") && host.endsWith("]")) return canonicalIpv6(host.slice(1, -1));
  if (host.includes(":")) return canonicalIpv6(host);
  if (fourPartDecimal(host)) return ipaddr.IPv4.parse(host).toString();
  // Characters that would end the host inside a URL: refuse rather than parse a prefix.
  if (host === "" || /[\s/\\?#@[\]\u0000-\u001f\u007f]/.test(host)) return null;
  let canonical: string;
  try {
    canonical = new URL(`http://${host}/`).hostname;
  } catch {
    return null;
  }
  return fourPartDecimal(canonical) ? canonical : null;
}

/**
 * ipaddr.js decides by parsing, which throws for a name: the shape is checked first, so the
 * common case (a host name) costs a regular expression instead of an exception.
 */
function fourPartDecimal(text: string): boolean {
  return /^\d{1,3}(?:\.\d{1,3}){3}$/.test(text) && ipaddr.IPv4.isValidFourPartDecimal(text);
}

export const MAX_CALLBACK_URL_LENGTH = 2048;

// Names that only ever mean "this machine" or "this private network":
// localhost (RFC 6761), mDNS .local (RFC 6762), .internal (ICANN, private use),
// home.arpa (RFC 8375) and the common .localdomain. A public receiver never has them.
const PRIVATE_SUFFIXES = ["localhost", "local", "internal", "home.arpa", "localdomain"];

export function hostnameRefusal(hostname: string): string | null {
  const ip = parseHostAsIp(hostname);
  if (ip !== null) {
    const verdict = checkAddress(ip);
    return verdict.allowed ? null : `${ip} is ${verdict.reason}`;
  }
  const name = hostname.toLowerCase().replace(/\.+$/, "");
  for (const suffix of PRIVATE_SUFFIXES) {
    if (name === suffix || name.endsWith(`.${suffix}`)) return `host ${hostname} is a private name (.${suffix})`;
  }
  // A single label resolves through resolver search domains or /etc/hosts,
  // i.e. to machines next to the relay, never to a public receiver.
  if (!name.includes(".")) return `host ${hostname} is a single-label name`;
  return null;
}

export type CallbackUrlVerdict = Readonly<{ ok: true; url: string } | { ok: false; reason: string }>;

/** Verdicts kept per setting of allowPrivateNetworks (a text is at most 2 KiB: at most about 1 MiB each). */
export const CALLBACK_VERDICTS_KEPT = 256;
/**
 * Recent verdicts by the URL's exact text, one cache per setting: the verdict depends on nothing
 * else (no DNS here; that is createGuardedLookup's, at send time), and a client sends the same few
 * callback URLs with every creation, so parsing each again cost intake about 5% of a creation.
 */
const verdicts = {
  public: new LRUCache<string, CallbackUrlVerdict>({ max: CALLBACK_VERDICTS_KEPT }),
  private: new LRUCache<string, CallbackUrlVerdict>({ max: CALLBACK_VERDICTS_KEPT }),
};

/**
 * Intake check of a callback URL (docs/contract.md, "Creating a task"). A fragment is stripped, not
 * refused: it is never sent over HTTP, so dropping it changes nothing on the wire. The verdict of a
 * text judged recently is the one it got then (frozen: shared between callers).
 */
export function validateCallbackUrl(raw: unknown, opts: { allowPrivateNetworks: boolean }): CallbackUrlVerdict {
  if (typeof raw !== "string") return judgeCallbackUrl(raw, opts);
  const cache = opts.allowPrivateNetworks ? verdicts.private : verdicts.public;
  let verdict = cache.get(raw);
  if (verdict === undefined) cache.set(raw, (verdict = Object.freeze(judgeCallbackUrl(raw, opts))));
  return verdict;
}

function judgeCallbackUrl(
  raw: unknown,
  opts: { allowPrivateNetworks: boolean },
): { ok: true; url: string } | { ok: false; reason: string } {
  const fail = (reason: string) => ({ ok: false, reason }) as const;
  if (typeof raw !== "string") return fail("not a string");
  if (raw === "") return fail("empty");
  if (raw.length > MAX_CALLBACK_URL_LENGTH) return fail(`longer than ${MAX_CALLBACK_URL_LENGTH} characters`);
  // The URL parser silently trims or deletes these; a URL that only works after such repair is refused.
  if (/[\s\u0000-\u001f\u007f]/.test(raw)) return fail("contains whitespace or control characters");
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return fail("not an absolute URL");
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && opts.allowPrivateNetworks)) {
    return fail(
      url.protocol === "http:"
        ? "scheme http: is not allowed (https only, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, for development)"
        : `scheme ${url.protocol} is not allowed`,
    );
  }
  if (url.username !== "" || url.password !== "") return fail("contains credentials (user or password)");
  if (url.hostname === "") return fail("has no host");
  url.hash = "";
  if (!opts.allowPrivateNetworks) {
    const refusal = hostnameRefusal(url.hostname);
    // Named, because a developer pointing a callback at a local receiver meets this first.
    if (refusal !== null)
      return fail(`${refusal}; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)`);
  }
  const normalised = url.href;
  if (normalised.length > MAX_CALLBACK_URL_LENGTH)
    return fail(`longer than ${MAX_CALLBACK_URL_LENGTH} characters once normalised`);
  return { ok: true, url: normalised };
}

export type Resolver = (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;
export type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

const defaultResolver: Resolver = async (hostname) => {
  const found = await dns.lookup(hostname, { all: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

function errnoError(code: string, message: string, hostname: string): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code, hostname });
}

/**
 * A `lookup` for net.connect / undici `connect: { lookup }`. Resolves all
 * addresses, refuses the whole name with code EBLOCKED if any one is not
 * public (a name that mixes public and private answers is hostile or
 * misconfigured), and answers only with the vetted addresses.
 */
export function createGuardedLookup(opts: { allowPrivateNetworks: boolean; resolve?: Resolver }) {
  const resolve = opts.resolve ?? defaultResolver;
  return (hostname: string, options: object, callback: LookupCallback): void => {
    const { all, family } = options as { all?: boolean; family?: number | string };
    const wantFamily = family === 4 || family === "IPv4" ? 4 : family === 6 || family === "IPv6" ? 6 : 0;
    const vet = async (): Promise<LookupAddress[]> => {
      const answers = await resolve(hostname);
      const addresses: LookupAddress[] = [];
      for (const answer of answers) {
        const kind = isIP(answer.address);
        if (kind === 0)
          throw errnoError("EBLOCKED", `${hostname} resolved to something that is not an IP address`, hostname);
        if (!opts.allowPrivateNetworks) {
          const verdict = checkAddress(answer.address);
          if (!verdict.allowed) {
            throw errnoError(
              "EBLOCKED",
              `${hostname} resolves to ${answer.address}, which is ${verdict.reason}`,
              hostname,
            );
          }
        }
        addresses.push({ address: answer.address, family: kind });
      }
      const usable = wantFamily === 0 ? addresses : addresses.filter((a) => a.family === wantFamily);
      if (usable.length === 0) throw errnoError("ENOTFOUND", `${hostname} has no usable address`, hostname);
      return usable;
    };
    // The callback runs outside the promise chain so that a throw inside it is not swallowed or reported twice.
    Promise.resolve()
      .then(vet)
      .then(
        (usable) =>
          process.nextTick(() => {
            const first = usable[0] as LookupAddress;
            if (all) callback(null, usable);
            else callback(null, first.address, first.family);
          }),
        (err: unknown) =>
          process.nextTick(() => {
            const error =
              err instanceof Error ? (err as NodeJS.ErrnoException) : errnoError("ENOTFOUND", String(err), hostname);
            callback(error, all ? [] : "");
          }),
      );
  };
}

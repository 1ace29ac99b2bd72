import { promisify } from "node:util";
import type { LookupAddress } from "node:dns";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CALLBACK_VERDICTS_KEPT,
  checkAddress,
  createGuardedLookup,
  parseHostAsIp,
  validateCallbackUrl,
} from "../../src/net/address-guard.js";

const BLOCKED: Array<[ip: string, reason: string]> = [
  // IPv4
  ["127.0.0.1", "loopback"],
  ["127.255.255.254", "loopback"],
  ["10.0.0.1", "private (RFC 1918)"],
  ["10.255.255.255", "private (RFC 1918)"],
  ["172.16.0.1", "private (RFC 1918)"],
  ["172.31.255.255", "private (RFC 1918)"],
  ["192.168.1.1", "private (RFC 1918)"],
  ["169.254.0.1", "link-local"],
  ["169.254.169.254", "link-local"],
  ["100.64.0.1", "cgnat"],
  ["100.127.255.255", "cgnat"],
  ["0.0.0.0", "unspecified (0.0.0.0/8)"],
  ["0.1.2.3", "unspecified (0.0.0.0/8)"],
  ["192.0.0.8", "IETF protocol assignments"],
  ["198.18.0.1", "benchmarking"],
  ["198.19.255.255", "benchmarking"],
  ["192.0.2.10", "documentation"],
  ["198.51.100.7", "documentation"],
  ["203.0.113.200", "documentation"],
  ["224.0.0.1", "multicast"],
  ["239.255.255.250", "multicast"],
  ["240.0.0.1", "reserved (class E)"],
  ["254.1.2.3", "reserved (class E)"],
  ["255.255.255.255", "broadcast"],
  // IPv6
  ["::1", "loopback"],
  ["::", "unspecified"],
  ["fc00::1", "unique-local"],
  ["fd12:3456:789a::1", "unique-local"],
  ["fe80::1", "link-local"],
  ["febf:ffff::1", "link-local"],
  ["ff02::1", "multicast"],
  ["ff0e::1", "multicast"],
  ["2001:db8::1", "documentation"],
  ["2001:db8:ffff::1", "documentation"],
  ["::ffff:127.0.0.1", "ipv4-mapped loopback"],
  ["::ffff:7f00:1", "ipv4-mapped loopback"],
  ["::ffff:10.0.0.1", "ipv4-mapped private (RFC 1918)"],
  ["::ffff:169.254.169.254", "ipv4-mapped link-local"],
  ["64:ff9b::7f00:1", "nat64 loopback"],
  ["64:ff9b::10.0.0.1", "nat64 private (RFC 1918)"],
  ["2002:7f00:1::", "6to4 loopback"],
  ["2002:a00:1::1", "6to4 private (RFC 1918)"],
  ["::127.0.0.1", "ipv4-compatible (deprecated)"],
  // ipaddr.js alone would read this as ::ffff:8.8.8.8 and allow it; the socket reads ::808:808.
  ["::8.8.8.8", "ipv4-compatible (deprecated)"],
  ["2001::1", "teredo"],
  ["fec0::1", "site-local (deprecated)"],
  ["100::1", "discard-only"],
  ["3fff::1", "documentation"],
  ["4000::1", "not global unicast"],
  ["fe80::1%eth0", "scoped (zone id) address"],
];

const ALLOWED = [
  "8.8.8.8",
  "1.1.1.1",
  "93.184.216.34",
  "172.15.255.255",
  "172.32.0.1",
  "100.63.255.255",
  "100.128.0.1",
  "169.253.255.255",
  "11.0.0.1",
  "223.255.255.255",
  "2606:4700:4700::1111",
  "2a00:1450:4001:82b::200e",
  "::ffff:8.8.8.8",
  "64:ff9b::808:808",
  "2002:808:808::1",
];

describe("checkAddress", () => {
  it.each(BLOCKED)("blocks %s (%s)", (ip, reason) => {
    expect(checkAddress(ip)).toEqual({ allowed: false, reason });
  });

  it.each(ALLOWED)("allows public %s", (ip) => {
    expect(checkAddress(ip)).toEqual({ allowed: true });
  });

  it("judges odd spellings by the address they name", () => {
    expect(checkAddress("2130706433")).toEqual({ allowed: false, reason: "loopback" });
    expect(checkAddress("0x7f.1")).toEqual({ allowed: false, reason: "loopback" });
    expect(checkAddress("0:0:0:0:0:ffff:7f00:0001")).toEqual({ allowed: false, reason: "ipv4-mapped loopback" });
  });

  it("refuses what is not an IP address", () => {
    for (const text of ["", "localhost", "example.com", "1.2.3.256", "::g", "1.2.3.4/8"]) {
      expect(checkAddress(text)).toEqual({ allowed: false, reason: "not an IP address" });
    }
  });

  it("blocks every address of the loopback, RFC 1918 and link-local ranges (property)", () => {
    const octet = fc.integer({ min: 0, max: 255 });
    fc.assert(
      fc.property(octet, octet, octet, (a, b, c) => {
        expect(checkAddress(`127.${a}.${b}.${c}`).allowed).toBe(false);
        expect(checkAddress(`10.${a}.${b}.${c}`).allowed).toBe(false);
        expect(checkAddress(`172.${16 + (a % 16)}.${b}.${c}`).allowed).toBe(false);
        expect(checkAddress(`169.254.${b}.${c}`).allowed).toBe(false);
        expect(checkAddress(`::ffff:192.168.${b}.${c}`).allowed).toBe(false);
      }),
    );
  });
});

describe("parseHostAsIp", () => {
  it.each([
    ["127.0.0.1", "127.0.0.1"],
    ["2130706433", "127.0.0.1"],
    ["0x7f000001", "127.0.0.1"],
    ["0X7F000001", "127.0.0.1"],
    ["0177.0.0.1", "127.0.0.1"],
    ["017700000001", "127.0.0.1"],
    ["127.1", "127.0.0.1"],
    ["0x7f.1", "127.0.0.1"],
    ["127.0.0.1.", "127.0.0.1"],
    ["%31%32%37.0.0.1", "127.0.0.1"],
    ["１２７.０.０.１", "127.0.0.1"],
    ["0", "0.0.0.0"],
    ["010.0.0.1", "8.0.0.1"],
    ["[::1]", "::1"],
    ["::1", "::1"],
    ["[::ffff:127.0.0.1]", "::ffff:127.0.0.1"],
    ["[::ffff:7f00:1]", "::ffff:127.0.0.1"],
    ["[0:0:0:0:0:0:0:1]", "::1"],
    ["[2606:4700:4700:0:0:0:0:1111]", "2606:4700:4700::1111"],
  ])("%s is the IP %s", (host, ip) => {
    expect(parseHostAsIp(host)).toBe(ip);
  });

  it.each([
    "example.com",
    "localhost",
    "foo.123",
    "1.2.3.256",
    "1.2.3.4.5",
    "[example.com]",
    "[::1",
    "a:b",
    "::ffff:0x7f.0.0.1",
    "",
    "127.0.0.1/x",
    "x@127.0.0.1",
  ])("%s is not an IP literal", (host) => {
    expect(parseHostAsIp(host)).toBeNull();
  });

  it("agrees with the WHATWG URL parser on decimal, hex and octal spellings of any IPv4 address (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), (n) => {
        const dotted = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
        const octal = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].map((o) => `0${o.toString(8)}`).join(".");
        for (const spelling of [String(n), `0x${n.toString(16)}`, octal]) {
          expect(parseHostAsIp(spelling)).toBe(dotted);
          expect(new URL(`https://${spelling}/`).hostname).toBe(dotted);
        }
      }),
    );
  });
});

describe("validateCallbackUrl", () => {
  const strict = { allowPrivateNetworks: false };
  const lax = { allowPrivateNetworks: true };

  it("judges a text once while it is recent: the same frozen verdict, per setting, a bounded number kept", () => {
    const first = validateCallbackUrl("https://memo.example.com/hook#a", strict);
    expect(first).toEqual({ ok: true, url: "https://memo.example.com/hook" });
    expect(validateCallbackUrl("https://memo.example.com/hook#a", strict)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    // The setting is part of the verdict: the same text judged under each.
    const refused = validateCallbackUrl("https://memo.localhost/hook", strict);
    expect(refused.ok).toBe(false);
    expect(validateCallbackUrl("https://memo.localhost/hook", lax)).toEqual({
      ok: true,
      url: "https://memo.localhost/hook",
    });
    expect(validateCallbackUrl("https://memo.localhost/hook", strict)).toBe(refused);
    // Past CALLBACK_VERDICTS_KEPT other texts, the first is judged again (an equal, new verdict).
    for (let i = 0; i < CALLBACK_VERDICTS_KEPT; i++) validateCallbackUrl(`https://memo.example.com/${i}`, strict);
    const again = validateCallbackUrl("https://memo.example.com/hook#a", strict);
    expect(again).toEqual(first);
    expect(again).not.toBe(first);
  });

  it("accepts a public https URL and returns it normalised, fragment stripped", () => {
    expect(validateCallbackUrl("https://hooks.example.com/genrelay?x=1", strict)).toEqual({
      ok: true,
      url: "https://hooks.example.com/genrelay?x=1",
    });
    expect(validateCallbackUrl("HTTPS://Hooks.Example.COM:8443/a/../b#frag", strict)).toEqual({
      ok: true,
      url: "https://hooks.example.com:8443/b",
    });
    expect(validateCallbackUrl("https://8.8.8.8/hook", strict)).toEqual({ ok: true, url: "https://8.8.8.8/hook" });
    expect(validateCallbackUrl("https://[2606:4700:4700::1111]/hook", strict)).toEqual({
      ok: true,
      url: "https://[2606:4700:4700::1111]/hook",
    });
    expect(validateCallbackUrl("https://bücher.example/hook", strict)).toEqual({
      ok: true,
      url: "https://xn--bcher-kva.example/hook",
    });
  });

  it.each([
    [
      "https://2130706433/",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://0x7f000001/",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://0177.0.0.1/",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://127.1/",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://127.0.0.1./",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://%31%32%37.0.0.1/",
      "127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://169.254.169.254/latest/meta-data/",
      "169.254.169.254 is link-local; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://10.1.2.3:8443/",
      "10.1.2.3 is private (RFC 1918); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://0/",
      "0.0.0.0 is unspecified (0.0.0.0/8); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://[::ffff:127.0.0.1]/",
      "::ffff:127.0.0.1 is ipv4-mapped loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    ["https://[::1]/", "::1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)"],
    ["https://[::]/", ":: is unspecified; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)"],
    [
      "https://[fd00::1]/",
      "fd00::1 is unique-local; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://[64:ff9b::7f00:1]/",
      "64:ff9b::7f00:1 is nat64 loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://localhost/",
      "host localhost is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://localhost./",
      "host localhost. is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://LOCALHOST/",
      "host localhost is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://foo.localhost/",
      "host foo.localhost is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://printer.local/",
      "host printer.local is a private name (.local); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://metadata.google.internal/",
      "host metadata.google.internal is a private name (.internal); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://router.home.arpa/",
      "host router.home.arpa is a private name (.home.arpa); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://intranet/",
      "host intranet is a single-label name; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://intranet./",
      "host intranet. is a single-label name; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "http://hooks.example.com/",
      "scheme http: is not allowed (https only, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, for development)",
    ],
    ["https://user:pass@hooks.example.com/", "contains credentials (user or password)"],
    ["https://user@hooks.example.com/", "contains credentials (user or password)"],
    [`https://hooks.example.com/${"a".repeat(2030)}`, "longer than 2048 characters"],
    ["ftp://hooks.example.com/", "scheme ftp: is not allowed"],
    ["javascript:alert(1)", "scheme javascript: is not allowed"],
    ["file:///etc/passwd", "scheme file: is not allowed"],
    ["data:text/plain,hi", "scheme data: is not allowed"],
    ["/relative/path", "not an absolute URL"],
    ["hooks.example.com/x", "not an absolute URL"],
    ["https://", "not an absolute URL"],
    ["https://1.2.3.256/", "not an absolute URL"],
    ["", "empty"],
    [" https://hooks.example.com/", "contains whitespace or control characters"],
    ["https://hooks.exa\nmple.com/", "contains whitespace or control characters"],
  ])("refuses %s", (raw, reason) => {
    expect(validateCallbackUrl(raw, strict)).toEqual({ ok: false, reason });
  });

  it("accepts exactly 2048 characters", () => {
    const base = "https://hooks.example.com/";
    const raw = base + "a".repeat(2048 - base.length);
    expect(validateCallbackUrl(raw, strict)).toEqual({ ok: true, url: raw });
    expect(validateCallbackUrl(`${raw}a`, strict).ok).toBe(false);
  });

  it.each([
    [undefined],
    [null],
    [42],
    [{ url: "https://hooks.example.com/" }],
    [["https://hooks.example.com/"]],
    [new URL("https://hooks.example.com/")],
  ])("refuses the non-string %j", (raw) => {
    expect(validateCallbackUrl(raw, strict)).toEqual({ ok: false, reason: "not a string" });
  });

  it("accepts loopback and private http URLs when private networks are allowed", () => {
    expect(validateCallbackUrl("http://127.0.0.1:9000/hook", lax)).toEqual({
      ok: true,
      url: "http://127.0.0.1:9000/hook",
    });
    expect(validateCallbackUrl("http://localhost:9000/hook", lax)).toEqual({
      ok: true,
      url: "http://localhost:9000/hook",
    });
    expect(validateCallbackUrl("http://[::1]:9000/", lax)).toEqual({ ok: true, url: "http://[::1]:9000/" });
    expect(validateCallbackUrl("http://2130706433/", lax)).toEqual({ ok: true, url: "http://127.0.0.1/" });
    expect(validateCallbackUrl("https://10.0.0.1/", lax)).toEqual({ ok: true, url: "https://10.0.0.1/" });
  });

  it("still refuses what is never a webhook URL when private networks are allowed", () => {
    expect(validateCallbackUrl("ftp://127.0.0.1/", lax)).toEqual({ ok: false, reason: "scheme ftp: is not allowed" });
    expect(validateCallbackUrl("http://u:p@127.0.0.1/", lax)).toEqual({
      ok: false,
      reason: "contains credentials (user or password)",
    });
    expect(validateCallbackUrl(7, lax)).toEqual({ ok: false, reason: "not a string" });
  });
});

type Answer = { address: string; family: 4 | 6 };
const resolverOf = (answers: Answer[]) => async () => answers;

function lookupAll(lookup: ReturnType<typeof createGuardedLookup>, host: string, options: object = { all: true }) {
  return promisify((h: string, o: object, cb: (err: NodeJS.ErrnoException | null, value: unknown) => void) =>
    lookup(h, o, (err, address, family) => cb(err, (options as { all?: boolean }).all ? address : { address, family })),
  )(host, options);
}

describe("createGuardedLookup", () => {
  const publicPair: Answer[] = [
    { address: "93.184.216.34", family: 4 },
    { address: "2606:2800:220:1:248:1893:25c8:1946", family: 6 },
  ];

  it("answers with every vetted address when options.all is set", async () => {
    const lookup = createGuardedLookup({ allowPrivateNetworks: false, resolve: resolverOf(publicPair) });
    const addresses = (await lookupAll(lookup, "hooks.example.com")) as LookupAddress[];
    expect(addresses).toEqual(publicPair);
  });

  it("answers with the first address (of the wanted family) without options.all", async () => {
    const lookup = createGuardedLookup({ allowPrivateNetworks: false, resolve: resolverOf(publicPair) });
    expect(await lookupAll(lookup, "hooks.example.com", {})).toEqual({ address: "93.184.216.34", family: 4 });
    expect(await lookupAll(lookup, "hooks.example.com", { family: 6 })).toEqual({
      address: "2606:2800:220:1:248:1893:25c8:1946",
      family: 6,
    });
  });

  it.each<[string, Answer[], string]>([
    ["loopback", [{ address: "127.0.0.1", family: 4 }], "127.0.0.1, which is loopback"],
    ["private", [{ address: "10.0.0.5", family: 4 }], "10.0.0.5, which is private (RFC 1918)"],
    ["metadata", [{ address: "169.254.169.254", family: 4 }], "169.254.169.254, which is link-local"],
    ["ipv6 loopback", [{ address: "::1", family: 6 }], "::1, which is loopback"],
    ["ipv4-mapped", [{ address: "::ffff:127.0.0.1", family: 6 }], "::ffff:127.0.0.1, which is ipv4-mapped loopback"],
    [
      "public then private",
      [
        { address: "93.184.216.34", family: 4 },
        { address: "192.168.0.10", family: 4 },
      ],
      "192.168.0.10, which is private (RFC 1918)",
    ],
    [
      "private AAAA beside public A",
      [
        { address: "93.184.216.34", family: 4 },
        { address: "fd00::1", family: 6 },
      ],
      "fd00::1, which is unique-local",
    ],
  ])("fails with EBLOCKED when any answer is %s", async (_label, answers, detail) => {
    const lookup = createGuardedLookup({ allowPrivateNetworks: false, resolve: resolverOf(answers) });
    await expect(lookupAll(lookup, "evil.example.com")).rejects.toMatchObject({
      code: "EBLOCKED",
      hostname: "evil.example.com",
      message: `evil.example.com resolves to ${detail}`,
    });
  });

  it("lets private answers through when private networks are allowed", async () => {
    const lookup = createGuardedLookup({
      allowPrivateNetworks: true,
      resolve: resolverOf([{ address: "127.0.0.1", family: 4 }]),
    });
    expect(await lookupAll(lookup, "receiver.test")).toEqual([{ address: "127.0.0.1", family: 4 }]);
  });

  it("refuses answers that are not IP addresses, and reports empty answers and resolver errors", async () => {
    const bogus = createGuardedLookup({
      allowPrivateNetworks: true,
      resolve: async () => [{ address: "localhost", family: 4 }],
    });
    await expect(lookupAll(bogus, "x.example.com")).rejects.toMatchObject({ code: "EBLOCKED" });
    const empty = createGuardedLookup({ allowPrivateNetworks: false, resolve: async () => [] });
    await expect(lookupAll(empty, "x.example.com")).rejects.toMatchObject({ code: "ENOTFOUND" });
    const wrongFamily = createGuardedLookup({
      allowPrivateNetworks: false,
      resolve: resolverOf([{ address: "8.8.8.8", family: 4 }]),
    });
    await expect(lookupAll(wrongFamily, "x.example.com", { family: 6 })).rejects.toMatchObject({ code: "ENOTFOUND" });
    const failing = createGuardedLookup({
      allowPrivateNetworks: false,
      resolve: async () => {
        throw Object.assign(new Error("getaddrinfo ENOTFOUND nope.example.com"), { code: "ENOTFOUND" });
      },
    });
    await expect(lookupAll(failing, "nope.example.com")).rejects.toMatchObject({ code: "ENOTFOUND" });
  });

  it("vets what the system resolver returns by default (localhost)", async () => {
    const lookup = createGuardedLookup({ allowPrivateNetworks: false });
    await expect(lookupAll(lookup, "localhost")).rejects.toMatchObject({ code: "EBLOCKED" });
  });

  it("vets an odd numeric spelling the system resolver accepts (inet_aton: 127.1)", async () => {
    const lookup = createGuardedLookup({ allowPrivateNetworks: false });
    await expect(lookupAll(lookup, "127.1")).rejects.toMatchObject({
      code: "EBLOCKED",
      message: expect.stringContaining("loopback"),
    });
  });
});

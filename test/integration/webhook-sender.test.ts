import http from "node:http";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { WebhookSender, type SendResult } from "../../src/webhooks/sender.js";
import { generateWebhookSecret, webhookHeaders } from "../../src/webhooks/sign.js";
import { createGuardedLookup } from "../../src/net/address-guard.js";

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

interface Receiver {
  port: number;
  url: (path?: string) => string;
  connections: number;
  requests: Received[];
  close: () => Promise<void>;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

/** A real loopback HTTP server; counts TCP connections so "nothing was sent" can be asserted. */
async function startReceiver(handler: (req: Received, res: http.ServerResponse) => void): Promise<Receiver> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const received: Received = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      receiver.requests.push(received);
      handler(received, res);
    });
  });
  server.on("connection", () => {
    receiver.connections += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const receiver: Receiver = {
    port,
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    connections: 0,
    requests: [],
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  cleanups.push(receiver.close);
  return receiver;
}

function newSender(opts: ConstructorParameters<typeof WebhookSender>[0]): WebhookSender {
  const sender = new WebhookSender(opts);
  cleanups.push(() => sender.close());
  return sender;
}

const secret = generateWebhookSecret();
const body = JSON.stringify({ type: "ping", timestamp: "2026-01-01T12:00:00.000Z", data: { id: "task_1" } });
/** The signed test body sent to `receiver` by a sender that may reach loopback. */
const sendTo = (receiver: { url(): string }, timeoutMs = 5_000) =>
  newSender({ allowPrivateNetworks: true }).send({ url: receiver.url(), headers: headersFor(), body, timeoutMs });
const headersFor = (payload = body) => webhookHeaders([secret], "evt_01", Math.floor(Date.now() / 1000), payload);
const toLoopback = async () => [{ address: "127.0.0.1", family: 4 as const }];

/** What a failed send that was not blocked by the address guard answers, with `fields`. */
const sentAndFailed = (fields: Partial<SendResult>) => ({ ok: false, blocked: false, ...fields });

/** A sender that may reach loopback, its resolver answering with `answer` and recording each name it is asked. */
function recordingResolver(answer: (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>> | []) {
  const resolved: string[] = [];
  const sender = newSender({
    allowPrivateNetworks: true,
    resolve: async (hostname) => {
      resolved.push(hostname);
      return answer(hostname);
    },
  });
  return { sender, resolved };
}

function expectNothingSent(result: SendResult, error: string): void {
  expect(result).toMatchObject({ ok: false, blocked: true, statusCode: null, error, responseBody: null, gone: false });
}

describe("WebhookSender against real loopback receivers", () => {
  it("delivers a signed POST and reports status, latency and the answer", async () => {
    const receiver = await startReceiver((_req, res) => setTimeout(() => res.end("thanks"), 60));
    const sender = newSender({ allowPrivateNetworks: true });
    const headers = headersFor();
    const result = await sender.send({ url: receiver.url("/hook?x=1"), headers, body, timeoutMs: 5_000 });

    expect(result).toEqual({
      ok: true,
      statusCode: 200,
      latencyMs: expect.any(Number),
      error: null,
      blocked: false,
      responseBody: "thanks",
      retryAfterMs: null,
      gone: false,
    });
    expect(result.latencyMs).toBeGreaterThanOrEqual(50);
    expect(result.latencyMs).toBeLessThan(5_000);
    const [got] = receiver.requests;
    expect(got).toMatchObject({ method: "POST", url: "/hook?x=1", body });
    expect(got?.headers["user-agent"]).toBe("genrelay/0.1");
    expect(got?.headers["content-type"]).toBe("application/json");
    expect(new Webhook(secret).verify(got?.body ?? "", got?.headers as Record<string, string>)).toEqual(
      JSON.parse(body),
    );
    // Results carry no header values.
    expect(JSON.stringify(result)).not.toContain(headers["webhook-signature"]);
  });

  it("keeps at most 4 KiB of a 100 KiB answer", async () => {
    const big = Array.from({ length: 100 * 1024 }, (_, i) => String.fromCharCode(97 + (i % 26))).join("");
    const receiver = await startReceiver((_req, res) => res.end(big));
    const result = await sendTo(receiver);
    expect(result.ok).toBe(true);
    expect(result.responseBody).toBe(big.slice(0, 4096));
  });

  it("never splits a multi-byte character at the 4 KiB cut", async () => {
    const receiver = await startReceiver((_req, res) => res.end(`x${"é".repeat(5000)}`));
    const result = await sendTo(receiver);
    expect(result.responseBody).toBe(`x${"é".repeat(2047)}`);
    expect(Buffer.byteLength(result.responseBody ?? "")).toBeLessThanOrEqual(4096);
  });

  it("reports a 500 as a failure with its body", async () => {
    const receiver = await startReceiver((_req, res) => {
      res.statusCode = 500;
      res.end('{"error":"boom"}');
    });
    const result = await sendTo(receiver);
    expect(result).toMatchObject(
      sentAndFailed({
        statusCode: 500,
        error: "HTTP 500",
        responseBody: '{"error":"boom"}',
        gone: false,
        retryAfterMs: null,
      }),
    );
  });

  it("reports 410 as gone", async () => {
    const receiver = await startReceiver((_req, res) => {
      res.statusCode = 410;
      res.end();
    });
    const result = await sendTo(receiver);
    expect(result).toMatchObject({ ok: false, statusCode: 410, gone: true, blocked: false, responseBody: "" });
    expect(result.error).toContain("410");
  });

  it("parses Retry-After as delta-seconds and as an HTTP-date", async () => {
    const now = Date.UTC(2026, 0, 1, 12, 0, 0);
    const receiver = await startReceiver((req, res) => {
      if (req.url === "/seconds") {
        res.writeHead(429, { "retry-after": "120" });
      } else {
        res.writeHead(503, { "retry-after": "Thu, 01 Jan 2026 12:05:00 GMT" });
      }
      res.end();
    });
    const sender = newSender({ allowPrivateNetworks: true, now: () => now });
    const seconds = await sender.send({ url: receiver.url("/seconds"), headers: headersFor(), body, timeoutMs: 5_000 });
    expect(seconds).toMatchObject({ ok: false, statusCode: 429, retryAfterMs: 120_000, latencyMs: 0 });
    const date = await sender.send({ url: receiver.url("/date"), headers: headersFor(), body, timeoutMs: 5_000 });
    expect(date).toMatchObject({ ok: false, statusCode: 503, retryAfterMs: 300_000 });
  });

  it("does not follow a redirect, and its target receives nothing", async () => {
    const target = await startReceiver((_req, res) => res.end("should not be here"));
    const redirector = await startReceiver((_req, res) => {
      res.writeHead(302, { location: target.url() });
      res.end();
    });
    const result = await sendTo(redirector);
    expect(result).toMatchObject({ ok: false, statusCode: 302, error: "redirect (302) not followed", blocked: false });
    expect(redirector.requests).toHaveLength(1);
    expect(target.connections).toBe(0);
    expect(target.requests).toHaveLength(0);
  });

  it("times out against a receiver that never answers", async () => {
    const receiver = await startReceiver(() => {});
    const result = await sendTo(receiver, 300);
    expect(result).toMatchObject(
      sentAndFailed({ statusCode: null, error: "timeout after 300 ms", responseBody: null }),
    );
    expect(result.latencyMs).toBeGreaterThanOrEqual(250);
    expect(result.latencyMs).toBeLessThan(3_000);
    expect(receiver.requests).toHaveLength(1);
  });

  it("times out when the body trickles past the limit, keeping the status seen", async () => {
    const receiver = await startReceiver((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("partial");
    });
    // Long enough for the status line to arrive first on a loaded machine (300 ms was not, at load 14).
    const result = await sendTo(receiver, 1_000);
    expect(result).toMatchObject({
      ok: false,
      statusCode: 200,
      error: "timeout after 1000 ms",
      responseBody: "partial",
    });
    expect(result.latencyMs).toBeLessThan(3_000);
  });

  it("times out while the name is still resolving", async () => {
    const sender = newSender({ allowPrivateNetworks: true, resolve: () => new Promise(() => {}) });
    const result = await sender.send({ url: "http://slow-dns.test/hook", headers: headersFor(), body, timeoutMs: 200 });
    expect(result).toMatchObject({ ok: false, statusCode: null, error: "timeout after 200 ms", blocked: false });
  });

  it("reports a refused connection", async () => {
    const receiver = await startReceiver(() => {});
    const port = receiver.port;
    await receiver.close();
    const sender = newSender({ allowPrivateNetworks: true });
    const result = await sender.send({
      url: `http://127.0.0.1:${port}/hook`,
      headers: headersFor(),
      body,
      timeoutMs: 5_000,
    });
    expect(result).toMatchObject(sentAndFailed({ statusCode: null, error: "connection refused", responseBody: null }));
  });

  it("reaches a hostname through the injected resolver and reuses the pooled connection", async () => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const { sender, resolved } = recordingResolver((hostname) => (hostname === "receiver.test" ? toLoopback() : []));
    const url = `http://receiver.test:${receiver.port}/hook`;
    const first = await sender.send({ url, headers: headersFor(), body, timeoutMs: 5_000 });
    // The socket returns to the pool a moment after the response ends; sent at once, the
    // second request would open a second (equally vetted) connection.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const second = await sender.send({ url, headers: headersFor(), body, timeoutMs: 5_000 });
    expect(first).toMatchObject({ ok: true, statusCode: 200, responseBody: "ok" });
    expect(second).toMatchObject({ ok: true, statusCode: 200 });
    expect(receiver.requests.map((r) => r.headers.host)).toEqual([
      `receiver.test:${receiver.port}`,
      `receiver.test:${receiver.port}`,
    ]);
    expect(resolved).toEqual(["receiver.test"]);
    expect(receiver.connections).toBe(1);
  });

  it("never calls lookup for an IP literal (net.connect skips it), which is why literals are checked first", async () => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const { sender, resolved } = recordingResolver(toLoopback);
    const result = await sender.send({ url: receiver.url(), headers: headersFor(), body, timeoutMs: 5_000 });
    expect(result.ok).toBe(true);
    expect(resolved).toEqual([]);
  });

  it("close waits for sends in flight, then answers new sends with an error instead of throwing", async () => {
    const receiver = await startReceiver((_req, res) => setTimeout(() => res.end("late"), 100));
    const sender = new WebhookSender({ allowPrivateNetworks: true });
    const inFlight = sender.send({ url: receiver.url(), headers: headersFor(), body, timeoutMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    await Promise.all([sender.close(), sender.close()]);
    expect(await inFlight).toMatchObject({ ok: true, responseBody: "late" });
    const result = await sender.send({ url: receiver.url(), headers: headersFor(), body, timeoutMs: 1_000 });
    expect(result).toMatchObject({ ok: false, statusCode: null, blocked: false, error: "sender closed" });
    expect(receiver.requests).toHaveLength(1);
  });

  it("closes promptly after a send timed out while connecting", async () => {
    const sender = new WebhookSender({ allowPrivateNetworks: true, resolve: () => new Promise(() => {}) });
    const result = await sender.send({ url: "http://slow-dns.test/hook", headers: headersFor(), body, timeoutMs: 100 });
    expect(result.error).toBe("timeout after 100 ms");
    const started = Date.now();
    await sender.close();
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});

describe("WebhookSender SSRF guard (private networks not allowed)", () => {
  it.each([
    [
      "https://127.0.0.1:PORT/hook",
      "blocked: 127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://2130706433:PORT/hook",
      "blocked: 127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://127.1:PORT/hook",
      "blocked: 127.0.0.1 is loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://[::ffff:127.0.0.1]:PORT/hook",
      "blocked: ::ffff:127.0.0.1 is ipv4-mapped loopback; allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "https://localhost:PORT/hook",
      "blocked: host localhost is a private name (.localhost); allowed only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (development only)",
    ],
    [
      "http://127.0.0.1:PORT/hook",
      "blocked: scheme http: is not allowed (https only, unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, for development)",
    ],
  ])("blocks %s before any connection", async (template, error) => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const resolved: string[] = [];
    const sender = newSender({
      allowPrivateNetworks: false,
      resolve: async (hostname) => {
        resolved.push(hostname);
        return toLoopback();
      },
    });
    const result = await sender.send({
      url: template.replace("PORT", String(receiver.port)),
      headers: headersFor(),
      body,
      timeoutMs: 2_000,
    });
    expectNothingSent(result, error);
    expect(receiver.connections).toBe(0);
    expect(resolved).toEqual([]);
  });

  it.each<[string, Array<{ address: string; family: 4 | 6 }>, string]>([
    ["loopback", [{ address: "127.0.0.1", family: 4 }], "127.0.0.1, which is loopback"],
    ["private", [{ address: "10.0.0.7", family: 4 }], "10.0.0.7, which is private (RFC 1918)"],
    ["metadata", [{ address: "169.254.169.254", family: 4 }], "169.254.169.254, which is link-local"],
    [
      "ipv4-mapped loopback",
      [{ address: "::ffff:127.0.0.1", family: 6 }],
      "::ffff:127.0.0.1, which is ipv4-mapped loopback",
    ],
    [
      "public and private",
      [
        { address: "93.184.216.34", family: 4 },
        { address: "127.0.0.1", family: 4 },
      ],
      "127.0.0.1, which is loopback",
    ],
  ])("blocks a hostname that resolves to %s, with no connection", async (_label, answers, detail) => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    let lookups = 0;
    const sender = newSender({
      allowPrivateNetworks: false,
      resolve: async () => {
        lookups += 1;
        return answers;
      },
    });
    const result = await sender.send({
      url: `https://hooks.example.com:${receiver.port}/hook`,
      headers: headersFor(),
      body,
      timeoutMs: 2_000,
    });
    expectNothingSent(result, `blocked: hooks.example.com resolves to ${detail}`);
    expect(lookups).toBe(1);
    expect(receiver.connections).toBe(0);
  });

  it("defeats DNS rebinding: public when validated, loopback at delivery, blocked at delivery", async () => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const answers = [
      [{ address: "93.184.216.34", family: 4 as const }],
      [{ address: "127.0.0.1", family: 4 as const }],
    ];
    let calls = 0;
    const rebinding = async () => answers[Math.min(calls++, answers.length - 1)] ?? [];

    // Validation time: the guard sees a public address and lets it through.
    const lookup = createGuardedLookup({ allowPrivateNetworks: false, resolve: rebinding });
    const vetted = await promisify(lookup)("rebind.example.com", { all: true });
    expect(vetted).toEqual([{ address: "93.184.216.34", family: 4 }]);

    // Delivery time: the name now points at loopback; the socket's own lookup refuses it.
    const sender = newSender({ allowPrivateNetworks: false, resolve: rebinding });
    const result = await sender.send({
      url: `https://rebind.example.com:${receiver.port}/hook`,
      headers: headersFor(),
      body,
      timeoutMs: 2_000,
    });
    expectNothingSent(result, "blocked: rebind.example.com resolves to 127.0.0.1, which is loopback");
    expect(calls).toBe(2);
    expect(receiver.connections).toBe(0);
  });
});

describe('connections per tenant and origin (docs/contract.md, "Connections per tenant")', () => {
  it("one tenant's requests hanging on every connection it may open to an origin do not hold another tenant's", async () => {
    const held: http.ServerResponse[] = [];
    const receiver = await startReceiver((req, res) => (req.url === "/slow" ? held.push(res) : res.end("ok")));
    const sender = newSender({ allowPrivateNetworks: true, connections: 2 });
    const slow = [1, 2, 3].map(() =>
      sender.send({ url: receiver.url("/slow"), headers: headersFor(), body, timeoutMs: 5_000, tenant: "cli_a" }),
    );
    await expect.poll(() => held.length).toBe(2);
    // Before #30: one pool per origin for everyone; this waited for a slow request to end.
    const started = Date.now();
    const other = await sender.send({
      url: receiver.url("/fast"),
      headers: headersFor(),
      body,
      timeoutMs: 2_000,
      tenant: "cli_b",
    });
    expect(other).toMatchObject({ ok: true, statusCode: 200 });
    expect(Date.now() - started).toBeLessThan(1_000);
    // The same tenant's next request waits for one of its own connections.
    expect(held).toHaveLength(2);
    for (const res of held) res.end("ok");
    await expect.poll(() => held.length).toBe(3);
    held[2]!.end("ok");
    expect((await Promise.all(slow)).map((r) => r.statusCode)).toEqual([200, 200, 200]);
  });

  it("keeps at most maxTenants pools: the longest unused is closed when another tenant's is opened", async () => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const sender = newSender({ allowPrivateNetworks: true, maxTenants: 2 });
    for (const tenant of ["a", "b", "c", "a", "d"]) {
      expect(
        (await sender.send({ url: receiver.url(), headers: headersFor(), body, timeoutMs: 2_000, tenant })).ok,
      ).toBe(true);
      expect(sender.tenantPools).toBeLessThanOrEqual(2);
    }
  });

  it("every tenant's connections go through the SSRF guard", async () => {
    const receiver = await startReceiver((_req, res) => res.end("ok"));
    const sender = newSender({ allowPrivateNetworks: false, resolve: toLoopback });
    for (const tenant of ["cli_a", "cli_b", undefined]) {
      const result = await sender.send({
        url: `https://hooks.example.com:${receiver.port}/hook`,
        headers: headersFor(),
        body,
        timeoutMs: 2_000,
        ...(tenant ? { tenant } : {}),
      });
      expectNothingSent(result, "blocked: hooks.example.com resolves to 127.0.0.1, which is loopback");
    }
    expect(receiver.connections).toBe(0);
  });
});

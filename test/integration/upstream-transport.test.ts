import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { errors, fetch as undiciFetch } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../../src/config.js";
import { DEFAULT_ACCOUNT, UpstreamAccounts } from "../../src/upstream/accounts.js";
import { UpstreamClient, type UpstreamClientOptions } from "../../src/upstream/client.js";
import { type UpstreamTransport, undiciTransport } from "../../src/upstream/transport.js";
import { upstreamFailure as failure } from "../helpers/upstream-failure.js";
import { startDripServer, startSilentServer, startStreamingUpstream } from "../helpers/hostile.js";

/**
 * The upstream client's transports (src/upstream/transport.ts, issue #43) against real loopback
 * servers: undici's pool (the default, what the relay runs on) and an injected fetch (what msw tests
 * run on) give the same answers, the same UpstreamError kinds and codes, and hold the same deadlines
 * and limits (docs/contract.md, "Deadlines everywhere", "Upstream answers").
 */
const MiB = 1024 * 1024;
const transports: Array<[string, Partial<UpstreamClientOptions>]> = [
  ["undici pool (default)", {}],
  ["injected fetch", { fetch: undiciFetch as unknown as typeof fetch }],
];

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A loopback upstream: answers as `answer` says, records each request, counts connections. */
async function upstream(answer: (seen: Seen, res: import("node:http").ServerResponse) => void) {
  const seen: Seen[] = [];
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (d: Buffer) => parts.push(d));
    req.on("end", () => {
      const s = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(parts).toString(),
      };
      seen.push(s);
      answer(s, res);
    });
  });
  server.on("connection", (socket: Socket) => {
    accepted++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    accepted: () => accepted,
    open: () => sockets.size,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe.each(transports)("the upstream client over %s", (_name, transport) => {
  const clients: UpstreamClient[] = [];
  const client = (options: Partial<UpstreamClientOptions> & { baseUrl: string }) => {
    const c = new UpstreamClient({ apiKey: "sk_test_key", timeoutMs: 5_000, ...transport, ...options });
    clients.push(c);
    return c;
  };
  afterEach(async () => {
    for (const c of clients.splice(0)) await c.close();
  });

  describe("a well-behaved upstream", () => {
    let up: Awaited<ReturnType<typeof upstream>>;
    beforeAll(async () => {
      up = await upstream((seen, res) => {
        res.writeHead(seen.method === "POST" ? 201 : 200, {
          "Content-Type": "application/json",
          "X-Request-Id": "req-1",
          "Idempotent-Replayed": "false",
        });
        res.end(JSON.stringify({ data: { id: "up-1", status: "queued" } }));
      });
    });
    afterAll(() => up.close());

    it("sends the documented headers, the trace and the body under the base URL's path, and reads the answer", async () => {
      const c = client({ baseUrl: `${up.url}/prefix/` });
      const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
      const created = await c.createTask("image", { model: "m", prompt: "p" }, "key-00000001", {
        traceparent,
        tracestate: null,
      });
      expect(created).toMatchObject({ task: { id: "up-1", status: "queued" }, replayed: false, httpStatus: 201 });
      expect(created.requestId).toBe("req-1");
      const page = await c.listTasks({ status: "processing", limit: 5 });
      expect(page?.tasks.length ?? 0).toBe(0);
      const [post, list] = up.seen.slice(-2);
      expect(post).toMatchObject({ method: "POST", url: "/prefix/openapi/v1/images/generations" });
      expect(JSON.parse(post!.body)).toEqual({ model: "m", prompt: "p" });
      expect(post!.headers).toMatchObject({
        authorization: "Bearer sk_test_key",
        accept: "application/json",
        "content-type": "application/json",
        "idempotency-key": "key-00000001",
        "user-agent": "genrelay",
      });
      expect(post!.headers.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
      expect(list).toMatchObject({ method: "GET", url: "/prefix/openapi/v1/tasks?limit=5&status=processing" });
    });
  });

  it("a refused connection is a retryable network error that names the cause", async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const e = await failure(client({ baseUrl: `http://127.0.0.1:${port}` }).getModels());
    expect(e).toMatchObject({ kind: "network", code: "network_error", retryable: true });
    expect(e.message).toMatch(/^GET \/openapi\/v1\/models failed: .*ECONNREFUSED/);
  });

  it("a connection reset before the answer is a retryable network error", async () => {
    const up = await upstream((_seen, res) => res.socket?.destroy());
    try {
      const e = await failure(client({ baseUrl: up.url }).getTask("reset"));
      expect(e).toMatchObject({ kind: "network", code: "network_error", retryable: true });
      expect(e.message).toMatch(/^GET \/openapi\/v1\/tasks\/reset failed: /);
    } finally {
      await up.close();
    }
  });

  it("a server that never answers ends at the total deadline, and its connection is closed", async () => {
    const silent = await startSilentServer();
    try {
      const started = performance.now();
      const e = await failure(client({ baseUrl: silent.url, timeoutMs: 300 }).getTask("slow"));
      expect(e).toMatchObject({
        kind: "timeout",
        code: "timeout",
        retryable: true,
        message: "GET /openapi/v1/tasks/slow timed out after 300 ms",
      });
      expect(performance.now() - started).toBeGreaterThanOrEqual(290);
      await silent.allClosed();
    } finally {
      await silent.close();
    }
  });

  it("a body that drips below the minimum rate ends as a timeout long before the total, its connection closed", async () => {
    const drip = await startDripServer({
      intervalMs: 50,
      headers: { "Content-Type": "application/json", "Content-Length": "4096" },
    });
    try {
      const started = performance.now();
      const e = await failure(
        client({ baseUrl: drip.url, timeoutMs: 20_000, minBodyRate: { bytes: 1024, windowMs: 400 } }).getTask("drip"),
      );
      expect(e).toMatchObject({ kind: "timeout", code: "timeout", retryable: true });
      expect(e.message).toMatch(/^GET \/openapi\/v1\/tasks\/drip timed out: the answer to .* below the minimum/);
      expect(performance.now() - started).toBeLessThan(5_000);
      await drip.allClosed();
    } finally {
      await drip.close();
    }
  });

  it("a declared Content-Length over the limit is refused before the body is read", async () => {
    const up = await startStreamingUpstream(50 * MiB, { contentLength: true });
    try {
      const e = await failure(client({ baseUrl: up.url, maxBodyBytes: MiB }).getTask("big"));
      expect(e).toMatchObject({ kind: "malformed", code: "response_too_large", retryable: false });
      await expect.poll(() => up.closedEarly()).toBe(true);
      expect(up.written()).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
    }
  });

  it("a body that streams past the limit is cancelled there, memory bounded", async () => {
    const up = await startStreamingUpstream(50 * MiB);
    try {
      const before = process.memoryUsage();
      const e = await failure(client({ baseUrl: up.url, maxBodyBytes: MiB }).getTask("big"));
      const after = process.memoryUsage();
      expect(e).toMatchObject({ kind: "malformed", status: 200, code: "response_too_large", retryable: false });
      await expect.poll(() => up.closedEarly()).toBe(true);
      expect(up.written()).toBeLessThan(16 * MiB);
      expect(after.arrayBuffers + after.external - before.arrayBuffers - before.external).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
    }
  });

  it("an error answer is read only as far as its message, with its code and Retry-After", async () => {
    const up = await upstream((_seen, res) => {
      res.writeHead(429, { "Content-Type": "application/json", "Retry-After": "7", "X-Request-Id": "req-429" });
      res.end(JSON.stringify({ error: { code: "rate_limit", message: "slow down sk_test_key" } }));
    });
    const big = await startStreamingUpstream(50 * MiB, { status: 502 });
    try {
      const e = await failure(client({ baseUrl: up.url }).getTask("limited"));
      expect(e).toMatchObject({ kind: "http", status: 429, code: "rate_limit", retryAfterMs: 7_000 });
      expect(e).toMatchObject({ requestId: "req-429", message: "slow down [redacted]" });
      const e502 = await failure(client({ baseUrl: big.url }).getTask("big"));
      expect(e502).toMatchObject({ kind: "http", status: 502, retryable: true });
      expect(big.written()).toBeLessThan(16 * MiB);
    } finally {
      await up.close();
      await big.close();
    }
  });
});

describe("the default transport", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
  });

  it("is undici's pool, not the global fetch, and close() ends its connections", async () => {
    const up = await upstream((_seen, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ data: { id: "up-1", status: "running" } }));
    });
    const globalFetch = vi.fn(() => Promise.reject(new Error("the global fetch was called")));
    vi.stubGlobal("fetch", globalFetch);
    try {
      const c = new UpstreamClient({ baseUrl: up.url, apiKey: "k" });
      expect(await c.getTask("up-1")).toMatchObject({ id: "up-1", status: "processing" });
      expect(globalFetch).not.toHaveBeenCalled();
      // Kept alive: calls one after another reuse their connections (undici may open a second while
      // the first is finishing its answer).
      for (let i = 0; i < 10; i++) await c.getTask("up-1");
      expect(up.accepted()).toBeLessThanOrEqual(2);
      expect(up.open()).toBe(up.accepted());
      await c.close();
      await expect.poll(() => up.open()).toBe(0);
    } finally {
      await up.close();
    }
  });

  it("maps undici's own header and body timeouts to timeouts", async () => {
    for (const err of [new errors.HeadersTimeoutError(), new errors.BodyTimeoutError()]) {
      const failing: UpstreamTransport = { send: () => Promise.reject(err), close: async () => {} };
      const e = await failure(
        new UpstreamClient({
          baseUrl: "http://127.0.0.1:9",
          apiKey: "k",
          transport: failing,
          timeoutMs: 5_000,
        }).getModels(),
      );
      expect(e).toMatchObject({ kind: "timeout", code: "timeout", retryable: true });
    }
  });

  it("hands a body that piled up while its reader was away over in the chunks it came in, never joined", async () => {
    // readLimited yields between slices (turnBytes); what arrives meanwhile must not come back as one
    // new buffer that the chunks were copied into (every byte of a long output copied once more).
    let sent: () => void = () => {};
    const allSent = new Promise<void>((r) => {
      sent = r;
    });
    const piece = Buffer.alloc(16 * 1024, "x");
    const up = await upstream((_seen, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      for (let i = 0; i < 64; i++) res.write(piece);
      res.end(() => sent());
    });
    const transport = undiciTransport(up.url, 10_000);
    try {
      const answer = await transport.send({
        method: "GET",
        path: "/v1/x",
        headers: {},
        signal: new AbortController().signal,
      });
      await allSent;
      // Turns for the client's socket to take in what the server wrote, with no one reading the body.
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      const sizes: number[] = [];
      for (let chunk = await answer.read(); chunk !== null; chunk = await answer.read()) sizes.push(chunk.byteLength);
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(MiB);
      // A socket read is at most 64 KiB (libuv's); a joined buffer is larger.
      expect(Math.max(...sizes)).toBeLessThanOrEqual(64 * 1024);
    } finally {
      await transport.close();
      await up.close();
    }
  });

  it("is one pool for every account of the relay's upstream, closed with them (the relay's stop)", async () => {
    const up = await upstream((_seen, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ data: { id: "up-1", status: "running" } }));
    });
    const config = loadConfig({ UPSTREAM_BASE_URL: up.url, UPSTREAM_API_KEY: "k", DATABASE_PATH: ":memory:" });
    const accounts = new UpstreamAccounts({ clients: { find: async () => undefined } }, config, up.url, "k");
    try {
      const client = await accounts.get(DEFAULT_ACCOUNT);
      await Promise.all([client.getTask("up-1"), client.getTask("up-1")]);
      expect(up.open()).toBe(2);
      // A client's close() leaves a pool it was given to its owner.
      await client.close();
      await client.getTask("up-1");
      expect(up.accepted()).toBe(2);
      await accounts.close();
      await expect.poll(() => up.open()).toBe(0);
    } finally {
      await up.close();
    }
  });
});

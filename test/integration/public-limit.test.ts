import { describe, expect, it } from "vitest";
import { PUBLIC_REQUESTS_PER_WINDOW, PUBLIC_WINDOW_MS } from "../../src/http/public-limit.js";
import { relaysClosedAfterEach, type TestRelay } from "../helpers/relay.js";

/**
 * Issue #38 item 4: every request the app answers without an API key is limited per address,
 * by rule (http/public-limit.ts), not by a list of routes: the JWKS, file links, stream-token
 * reads, the OpenAPI document, the docs, /metrics, unknown paths and a route mounted after the
 * app was built. The probes and the dashboard are exempt by name; a request with a valid key is
 * never counted. Requests carry a socket address as @hono/node-server gives it (env.incoming).
 */

const relay = relaysClosedAfterEach();

const FLOODER = "198.51.100.7";
const TOKEN = `task_${"0".repeat(26)}.1.${"A".repeat(43)}`;

function from(t: TestRelay, address: string, path: string, init: RequestInit = {}) {
  return Promise.resolve(
    t.relay.app.request(`http://relay.test${path}`, init, { incoming: { socket: { remoteAddress: address } } }),
  );
}

/** Sends `n` requests from `address` and counts their statuses. */
async function flood(t: TestRelay, address: string, path: string, n: number, init: RequestInit = {}) {
  const statuses = new Map<number, number>();
  for (let i = 0; i < n; i++) {
    const res = await from(t, address, path, init);
    await res.arrayBuffer();
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
  }
  return statuses;
}

const refusal = (seconds: number) => ({
  error: {
    code: "rate_limit",
    message: `Too many requests without an API key from this address: at most ${PUBLIC_REQUESTS_PER_WINDOW} every ${PUBLIC_WINDOW_MS / 1000} seconds. Retry after ${seconds} s.`,
    request_id: expect.stringMatching(/^req_/),
  },
});

describe("the per-address limit on public routes", () => {
  const publicPaths: Array<[string, string, RequestInit?]> = [
    ["JWKS", "/openapi/v1/webhooks/jwks/cli_unknown"],
    ["a file link (GET)", `/files/${TOKEN}`],
    ["a file link (HEAD)", `/files/${TOKEN}`, { method: "HEAD" }],
    ["a stream-token read", "/openapi/v1/tasks/task_unknown/events?token=st_nothing"],
    ["the OpenAPI document", "/openapi.json"],
    ["the rendered docs", "/docs"],
    ["the metrics", "/metrics"],
    ["an unknown path", "/no/such/path"],
  ];

  it.each(publicPaths)(
    "%s: past the limit, 429 rate_limit with Retry-After and the whole error body",
    async (_name, path, init) => {
      const t = relay();
      const counts = await flood(t, FLOODER, path, PUBLIC_REQUESTS_PER_WINDOW, init);
      expect(counts.get(429)).toBeUndefined();
      t.clock.advance(2_500);
      const res = await from(t, FLOODER, path, { method: "GET" });
      expect(res.status).toBe(429);
      // The first counted request leaves the window 10 s after it came: 7.5 s from now, rounded up.
      expect(res.headers.get("retry-after")).toBe("8");
      expect(await res.json()).toEqual(refusal(8));
    },
  );

  it("a route mounted after the app was built inherits the limit without being listed", async () => {
    const t = relay();
    t.relay.app.get("/tomorrows-public-route", (c) => c.text("hello"));
    const counts = await flood(t, FLOODER, "/tomorrows-public-route", PUBLIC_REQUESTS_PER_WINDOW + 50);
    expect(Object.fromEntries(counts)).toEqual({ 200: PUBLIC_REQUESTS_PER_WINDOW, 429: 50 });
  });

  it("refusals are not counted: the address is let in again as its requests leave the window", async () => {
    const t = relay();
    const path = "/openapi/v1/webhooks/jwks/cli_unknown";
    expect(Object.fromEntries(await flood(t, FLOODER, path, PUBLIC_REQUESTS_PER_WINDOW))).toEqual({
      404: PUBLIC_REQUESTS_PER_WINDOW,
    });
    t.clock.advance(PUBLIC_WINDOW_MS / 2);
    expect(Object.fromEntries(await flood(t, FLOODER, path, 1000))).toEqual({ 429: 1000 });
    t.clock.advance(PUBLIC_WINDOW_MS / 2);
    expect(Object.fromEntries(await flood(t, FLOODER, path, PUBLIC_REQUESTS_PER_WINDOW + 1))).toEqual({
      404: PUBLIC_REQUESTS_PER_WINDOW,
      429: 1,
    });
  });

  it("counts each address apart, an IPv6 host by its /64, an IPv4-mapped address as IPv4", async () => {
    const t = relay();
    const path = "/no/such/path";
    await flood(t, "2001:db8:1:2::1", path, PUBLIC_REQUESTS_PER_WINDOW);
    expect((await from(t, "2001:db8:1:2:ffff::9", path)).status).toBe(429);
    expect((await from(t, "2001:db8:1:3::1", path)).status).toBe(404);
    await flood(t, "203.0.113.5", path, PUBLIC_REQUESTS_PER_WINDOW);
    expect((await from(t, "::ffff:203.0.113.5", path)).status).toBe(429);
    expect((await from(t, "203.0.113.6", path)).status).toBe(404);
  });

  it("never counts nor refuses a request with a valid key, from the flooding address too", async () => {
    const t = relay();
    const victim = t.client("victim");
    await flood(t, FLOODER, "/openapi.json", PUBLIC_REQUESTS_PER_WINDOW + 10);
    const auth = { headers: { Authorization: `Bearer ${victim.apiKey}` } };
    expect(Object.fromEntries(await flood(t, FLOODER, "/openapi/v1/tasks", 300, auth))).toEqual({ 200: 300 });
    // A wrong key is answered 401 by the API-key middleware, as without the limit.
    const wrong = await from(t, FLOODER, "/openapi/v1/tasks", { headers: { Authorization: "Bearer grk_wrong" } });
    expect(wrong.status).toBe(401);
  });

  it("exempts the probes and the dashboard by name", async () => {
    const t = relay();
    await flood(t, FLOODER, "/no/such/path", PUBLIC_REQUESTS_PER_WINDOW);
    expect((await from(t, FLOODER, "/no/such/path")).status).toBe(429);
    expect(Object.fromEntries(await flood(t, FLOODER, "/healthz", 300))).toEqual({ 200: 300 });
    expect((await from(t, FLOODER, "/readyz")).status).not.toBe(429);
    expect((await from(t, FLOODER, "/dashboard")).status).toBe(200);
  });

  it("documents the 429 on every public operation but the probes", async () => {
    const t = relay();
    const doc = (await (await t.relay.app.request("http://relay.test/openapi.json")).json()) as {
      paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, unknown> }>>;
    };
    const publicOps = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => Array.isArray(op.security) && op.security.length === 0)
        .map(([method, op]) => ({ op: `${method} ${path}`, limited: "429" in op.responses })),
    );
    expect(publicOps.filter((o) => !o.limited).map((o) => o.op)).toEqual(["get /healthz", "get /readyz"]);
    expect(publicOps.map((o) => o.op)).toEqual(
      expect.arrayContaining([
        "get /files/{token}",
        "head /files/{token}",
        "get /openapi/v1/webhooks/jwks/{client_id}",
      ]),
    );
  });
});

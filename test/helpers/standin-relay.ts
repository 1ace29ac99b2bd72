import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A relay that answers as a test tells it, for the connectors' fail-closed cases a real relay cannot
 * be put in (a client signing with ed25519 past any switch overlap, a JWKS that fails): its webhook
 * settings, its JWKS (a status to answer), a task's cancel; every request it got, by method and path.
 */
export interface StandinRelay {
  url: string;
  settings: Record<string, unknown>;
  jwksStatus: number;
  requests: string[];
  /** How many requests of `method path` it got. */
  count(what: string): number;
  close(): Promise<void>;
}

export async function startStandinRelay(): Promise<StandinRelay> {
  const relay: Omit<StandinRelay, "url" | "close"> = {
    settings: { notification_url: null, callback_headers: null, signature: "ed25519" },
    jwksStatus: 503,
    requests: [],
    count: (what) => relay.requests.filter((r) => r === what).length,
  };
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://relay").pathname;
    relay.requests.push(`${req.method} ${path}`);
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method === "GET" && path === "/openapi/v1/webhooks/settings") return answer(200, { data: relay.settings });
    if (req.method === "GET" && path.startsWith("/openapi/v1/webhooks/jwks/"))
      return answer(relay.jwksStatus, { error: { code: "unavailable", message: "stand-in" } });
    if (req.method === "GET" && path === "/openapi/v1/tasks") return answer(200, { data: [], next_cursor: null });
    const cancel = /^\/openapi\/v1\/tasks\/([^/]+)\/cancel$/.exec(path);
    if (req.method === "POST" && cancel)
      return answer(200, {
        data: { id: decodeURIComponent(cancel[1]!), type: "image", status: "canceled", error: null },
        output: null,
        usage: { points_charged: 0, points_refunded: null },
      });
    answer(404, { error: { code: "not_found", message: `stand-in has no ${req.method} ${path}` } });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(relay, {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }) as StandinRelay;
}

/** A fresh `whsec_` secret of 32 random bytes. */
export const newSecret = (): string => `whsec_${randomBytes(32).toString("base64")}`;

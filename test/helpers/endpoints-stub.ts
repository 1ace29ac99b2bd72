import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * `endpointsStub`: a STAND-IN for the relay's endpoints API (docs/contract.md, "Planned":
 * `POST`/`GET /openapi/v1/webhooks/endpoints`, `GET`/`DELETE /openapi/v1/webhooks/endpoints/{id}`),
 * which is not served yet. It sits in front of a real relay on loopback: those four routes are
 * answered here, as the contract words them, and every other request is passed through to the relay
 * unchanged. A connector under test is given the stub's URL as its base URL, so only its endpoint
 * calls are stubbed; tasks, models and the event feed are the relay's own.
 *
 * When the relay serves the endpoints API, delete this file and give the connectors the relay's URL:
 * the tests that use the stub assert through the same HTTP API and need no other change.
 *
 * The stub registers subscriptions and nothing more: it delivers no event to an endpoint.
 */
export interface EndpointsStub {
  url: string;
  close(): Promise<void>;
}

const TASK_EVENTS = ["task.processing", "task.succeeded", "task.failed", "task.canceled"];
const DEFAULT_EVENTS = ["task.succeeded", "task.failed", "task.canceled"];
const ROUTE = /^\/openapi\/v1\/webhooks\/endpoints(?:\/([^/?]+))?\/?(?:\?.*)?$/;

interface Endpoint {
  owner: string;
  id: string;
  url: string;
  events: string[];
  description: string | null;
  created_at: string;
}

const requestId = (): string => `req_stub${randomBytes(6).toString("hex")}`;

function send(res: http.ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
}

function error(res: http.ServerResponse, status: number, code: string, message: string): void {
  send(res, status, { error: { code, message, request_id: requestId() } });
}

/** The contract's checks of a creation body, as far as a stand-in needs them; null when it is acceptable. */
function problem(body: unknown): string | null {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return "the body must be a JSON object";
  const b = body as Record<string, unknown>;
  if (typeof b.url !== "string" || !/^https?:\/\/[^/\s@]+(\/|$)/.test(b.url) || b.url.length > 2048)
    return "url must be an absolute http(s) URL";
  if (
    b.events !== undefined &&
    (!Array.isArray(b.events) || b.events.length === 0 || b.events.some((e) => !TASK_EVENTS.includes(e as string)))
  ) {
    return `events must be a non-empty list of ${TASK_EVENTS.join(", ")}`;
  }
  if (
    b.description !== undefined &&
    b.description !== null &&
    (typeof b.description !== "string" || b.description.length > 500)
  )
    return "description must be a string";
  if (b.headers !== undefined && (typeof b.headers !== "object" || b.headers === null || Array.isArray(b.headers)))
    return "headers must be an object";
  return null;
}

const view = (e: Endpoint) => ({
  id: e.id,
  url: e.url,
  events: e.events,
  description: e.description,
  created_at: e.created_at,
});

export async function endpointsStub(relayUrl: string): Promise<EndpointsStub> {
  const endpoints = new Map<string, Endpoint>();

  /** The caller's identity, checked by the relay itself: null (after answering 401) when the key is refused. */
  async function owner(req: http.IncomingMessage, res: http.ServerResponse): Promise<string | null> {
    const authorization = req.headers.authorization ?? "";
    const check = await fetch(`${relayUrl}/openapi/v1/tasks?limit=1`, { headers: { authorization } });
    if (check.status === 401) {
      send(res, 401, await check.json());
      return null;
    }
    return createHash("sha256").update(authorization).digest("hex");
  }

  async function endpointsRoute(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    id: string | undefined,
    body: Buffer,
  ): Promise<void> {
    const who = await owner(req, res);
    if (who === null) return;
    if (id === undefined && req.method === "POST") {
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString("utf8"));
      } catch {
        return error(res, 400, "invalid_request", "The body is not JSON.");
      }
      const why = problem(parsed);
      if (why !== null) return error(res, 422, "validation_error", why);
      const b = parsed as { url: string; events?: string[]; description?: string | null };
      const endpoint: Endpoint = {
        owner: who,
        id: `ep_${randomBytes(10).toString("hex")}`,
        url: b.url,
        events: b.events ? [...new Set(b.events)] : [...DEFAULT_EVENTS],
        description: b.description ?? null,
        created_at: new Date().toISOString(),
      };
      endpoints.set(endpoint.id, endpoint);
      return send(res, 201, { data: view(endpoint) });
    }
    if (id === undefined && req.method === "GET") {
      return send(res, 200, { data: [...endpoints.values()].filter((e) => e.owner === who).map(view) });
    }
    if (id === undefined) return error(res, 405, "method_not_allowed", `${req.method} is not allowed here.`);
    const endpoint = endpoints.get(decodeURIComponent(id));
    if (!endpoint || endpoint.owner !== who) return error(res, 404, "not_found", "No such endpoint.");
    if (req.method === "GET") return send(res, 200, { data: view(endpoint) });
    if (req.method === "DELETE") {
      endpoints.delete(endpoint.id);
      return send(res, 204);
    }
    return error(res, 405, "method_not_allowed", `${req.method} is not allowed here.`);
  }

  /** Everything else goes to the real relay as it came. */
  async function passThrough(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): Promise<void> {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || ["host", "connection", "content-length", "transfer-encoding"].includes(name)) continue;
      headers.set(name, Array.isArray(value) ? value.join(", ") : value);
    }
    const hasBody = req.method !== "GET" && req.method !== "HEAD";
    const answer = await fetch(`${relayUrl}${req.url ?? "/"}`, {
      method: req.method ?? "GET",
      headers,
      body: hasBody ? body : undefined,
      redirect: "manual",
    });
    const out: Record<string, string> = {};
    answer.headers.forEach((value, name) => {
      if (!["content-encoding", "content-length", "transfer-encoding", "connection"].includes(name)) out[name] = value;
    });
    res.writeHead(answer.status, out).end(Buffer.from(await answer.arrayBuffer()));
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const route = ROUTE.exec(req.url ?? "");
      const handled = route ? endpointsRoute(req, res, route[1], body) : passThrough(req, res, body);
      handled.catch((err: unknown) => {
        if (!res.headersSent) error(res, 502, "stub_error", (err as Error).message);
        else res.destroy();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

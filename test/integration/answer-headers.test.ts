import { Agent, request } from "undici";
import { afterAll, describe, expect, it, vi } from "vitest";
import { servedRelayPerFile } from "../helpers/served.js";
import { imageBody } from "../helpers/relay.js";

/**
 * Served by @hono/node-server, X-Request-Id and a creation's own headers are set on Node's
 * response rather than on a web `Headers` (http/middleware.ts, answerHeader): the answers on the
 * wire carry the same headers as the same requests answered in process (`app.request()`), where
 * they are set on hono's context, errors included, with the right Content-Length.
 */
const served = servedRelayPerFile({ PUBLIC_BASE_URL: "https://relay.example" }, "headers");
const agent = new Agent({ connections: 2 });
afterAll(() => agent.close());
const CREATE = "/openapi/v1/images/generations";

interface Sent {
  method?: "GET" | "POST";
  key?: string;
  body?: unknown;
  auth?: string;
}

/** Headers of a connection, not of an answer: only the wire has them. */
const WIRE_ONLY = new Set(["connection", "keep-alive", "date", "content-length"]);

function headersOf(sent: Sent): Record<string, string> {
  const h: Record<string, string> = { authorization: sent.auth ?? `Bearer ${served.apiKey}` };
  if (sent.key) h["idempotency-key"] = sent.key;
  if (sent.body !== undefined) h["content-type"] = "application/json";
  return h;
}

async function overHttp(path: string, sent: Sent) {
  const res = await request(`${served.origin}${path}`, {
    method: sent.method ?? "POST",
    dispatcher: agent,
    headers: headersOf(sent),
    body: sent.body === undefined ? undefined : JSON.stringify(sent.body),
  });
  const text = await res.body.text();
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(res.headers)) headers[name] = String(value);
  return { status: res.statusCode, headers, text };
}

async function inProcess(path: string, sent: Sent) {
  const res = await served.t.relay.app.request(`https://relay.example${path}`, {
    method: sent.method ?? "POST",
    headers: headersOf(sent),
    body: sent.body === undefined ? undefined : JSON.stringify(sent.body),
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
}

/** Each header's value with the parts that differ between two answers (ids, times) replaced. */
function shape(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers)
      .filter(([name]) => !WIRE_ONLY.has(name))
      .map(([name, value]) => [name, value.replace(/req_[\w-]+/, "req_ID").replace(/task_[0-9a-z]{26}/, "task_ID")]),
  );
}

describe("answers served over HTTP carry the headers they carry in process", () => {
  it("a creation: 201 with X-Request-Id, Location, Idempotent-Replayed, its JSON and its length; its replay 200", async () => {
    const wire = await overHttp(CREATE, { key: "wire-key-0001", body: imageBody() });
    const local = await inProcess(CREATE, { key: "local-key-0001", body: imageBody() });
    expect(wire.status).toBe(201);
    expect(local.status).toBe(201);
    const id = (JSON.parse(wire.text) as { data: { id: string } }).data.id;
    expect(wire.headers).toEqual({
      "x-request-id": expect.stringMatching(/^req_[\w-]{16}$/),
      location: `https://relay.example/openapi/v1/tasks/${id}`,
      "idempotent-replayed": "false",
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(wire.text)),
      connection: "keep-alive",
      "keep-alive": expect.any(String),
      date: expect.any(String),
    });
    expect(shape(wire.headers)).toEqual(shape(local.headers));

    const replay = await overHttp(CREATE, { key: "wire-key-0001", body: imageBody() });
    expect(replay.status).toBe(200);
    expect(replay.headers["idempotent-replayed"]).toBe("true");
    expect(replay.headers.location).toBe(`https://relay.example/openapi/v1/tasks/${id}`);
    expect(replay.headers["x-request-id"]).not.toBe(wire.headers["x-request-id"]);
    expect(replay.text).toBe(wire.text);
  });

  it.each([
    ["a refused creation (422)", CREATE, { key: "bad-key-0001", body: imageBody({ count: 0 }) }],
    ["an unknown API key (401)", CREATE, { key: "auth-key-0001", body: imageBody(), auth: "Bearer grk_nope" }],
    ["an unknown task (404)", "/openapi/v1/tasks/task_00000000000000000000000000", { method: "GET" }],
    ["an unknown path (404)", "/openapi/v1/nowhere", { method: "GET" }],
  ] as const)(
    "%s: the error's request_id is its X-Request-Id, and nothing else is added",
    async (_name, path, sent) => {
      const wire = await overHttp(path, sent);
      const local = await inProcess(path, sent);
      expect(wire.status).toBe(local.status);
      expect(wire.status).toBeGreaterThanOrEqual(400);
      const body = JSON.parse(wire.text) as { error: { request_id: string } };
      expect(body.error.request_id).toBe(wire.headers["x-request-id"]);
      expect(wire.headers["content-length"]).toBe(String(Buffer.byteLength(wire.text)));
      expect(shape(wire.headers)).toEqual(shape(local.headers));
      expect(Object.keys(shape(wire.headers)).sort()).toEqual(["content-type", "x-request-id"]);
    },
  );
});

describe("a creation's body", () => {
  it("is parsed once: boundedBodies' value is the one validated (jsonBody), not the text parsed again", async () => {
    const text = JSON.stringify(imageBody({ prompt: "parsed once" }));
    const parse = vi.spyOn(JSON, "parse");
    try {
      const res = await request(`${served.origin}${CREATE}`, {
        method: "POST",
        dispatcher: agent,
        headers: { ...headersOf({ key: "parse-key-0001" }), "content-type": "application/json" },
        body: text,
      });
      expect(res.statusCode).toBe(201);
      await res.body.text();
      expect(parse.mock.calls.filter(([arg]) => arg === text)).toHaveLength(1);
    } finally {
      parse.mockRestore();
    }
  });
});

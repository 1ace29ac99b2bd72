import { serve, getRequestListener } from "@hono/node-server";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { directCreations } from "../../src/http/direct-creations.js";
import { capturedLogger } from "../helpers/log-lines.js";
import { createTestRelay, imageBody, type TestRelay, videoBody } from "../helpers/relay.js";

/**
 * The creation routes' direct path (src/http/direct-creations.ts) against the app served as it was
 * before it (@hono/node-server alone), on one relay: the same requests get the same answers, status,
 * headers and bodies (ids, the port replaced), accepted and refused; an accepted or replayed creation
 * never reaches the app, every other request does, once; both write the same request line and count
 * under the same labels.
 */
const { logger, lines } = capturedLogger();
let t: TestRelay;
let apiKey: string;
let direct: Server;
let plain: Server;
const origins = { direct: "", plain: "" };
/** Requests the direct path handed to the app's listener. */
let handedOn = 0;
const agent = new Agent({ connections: 4 });

const listening = (server: Server) =>
  new Promise<string>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)),
  );

beforeAll(async () => {
  t = createTestRelay({}, { logger });
  apiKey = t.client("direct").apiKey;
  const app = getRequestListener(t.relay.app.fetch);
  const counted: RequestListener = (req, res) => {
    handedOn++;
    void app(req, res);
  };
  direct = createServer(directCreations({ ...t.relay.deps, metrics: t.relay.metrics }, counted));
  origins.direct = await listening(direct);
  plain = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: t.relay.app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s as Server)) as Server;
  });
  origins.plain = `http://127.0.0.1:${(plain.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await agent.close();
  for (const server of [direct, plain]) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  await t.close();
});

interface Sent {
  path?: string;
  headers?: Record<string, string>;
  body?: string;
}

const CREATE = "/openapi/v1/images/generations";
const json = (value: unknown) => JSON.stringify(value);
const creation = (key: string | null, body: unknown, more: Record<string, string> = {}): Sent => ({
  headers: {
    authorization: `Bearer ${apiKey}`,
    "content-type": "application/json",
    ...(key === null ? {} : { "idempotency-key": key }),
    ...more,
  },
  body: json(body),
});

/** One request to one side: status, headers without the connection's own, and the body, ids and port replaced. */
async function send(side: "direct" | "plain", sent: Sent) {
  const res = await request(`${origins[side]}${sent.path ?? CREATE}`, {
    method: "POST",
    dispatcher: agent,
    headers: sent.headers ?? {},
    body: sent.body,
  });
  const text = await res.body.text();
  const normal = (s: string) =>
    s
      .replace(/req_[\w-]{16}/g, "req_ID")
      .replace(/task_[0-9a-z]{26}/g, "task_ID")
      .replace(/127\.0\.0\.1:\d+/g, "HOST");
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(res.headers))
    if (!["connection", "keep-alive", "date"].includes(name)) headers[name] = normal(String(value));
  return { status: res.statusCode, headers, body: normal(text), raw: text };
}

/** The same request to both sides (each side's own Idempotency-Key suffix, so each creates its own task). */
async function both(make: (side: string) => Sent) {
  const before = handedOn;
  const d = await send("direct", make("d"));
  const handed = handedOn - before;
  const p = await send("plain", make("p"));
  expect(d).toEqual({ ...p, raw: d.raw });
  return { answer: d, handed };
}

describe("the creation routes' direct path answers what the app answers", () => {
  it("accepted (201, image and video) and replayed (200): answered on the direct path, nothing handed on", async () => {
    const image = await both((s) => creation(`img-key-${s}-0001`, imageBody()));
    expect(image.answer.status).toBe(201);
    expect(image.handed).toBe(0);
    const id = (JSON.parse(image.answer.raw) as { data: { id: string } }).data.id;
    expect(image.answer.headers).toEqual({
      "x-request-id": "req_ID",
      location: "http://HOST/openapi/v1/tasks/task_ID",
      "idempotent-replayed": "false",
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(image.answer.raw)),
    });
    const stored = await t.relay.deps.store.tasks.find(id);
    expect(stored?.idempotencyKey).toBe("img-key-d-0001");

    const video = await both((s) => ({
      ...creation(`vid-key-${s}-0001`, videoBody(), { "cancel-after": "10m", traceparent: "x" }),
      path: "/openapi/v1/videos/generations",
    }));
    expect(video.answer.status).toBe(201);
    expect(video.handed).toBe(0);

    const replay = await both((s) => creation(`img-key-${s}-0001`, imageBody()));
    expect(replay.answer.status).toBe(200);
    expect(replay.answer.headers["idempotent-replayed"]).toBe("true");
    expect(replay.answer.raw).toBe(image.answer.raw);
    expect(replay.handed).toBe(0);
  });

  const big = json(imageBody({ prompt: "x".repeat(1024 * 1024) }));
  it.each<[string, (side: string) => Sent, number]>([
    [
      "no API key",
      (s) => ({ ...creation(`k-${s}-00001`, imageBody()), headers: { "content-type": "application/json" } }),
      401,
    ],
    ["an unknown API key", (s) => creation(`k-${s}-00002`, imageBody(), { authorization: "Bearer grk_nope" }), 401],
    ["malformed JSON", (s) => ({ ...creation(`k-${s}-00003`, {}), body: "{" }), 400],
    ["no Idempotency-Key", () => creation(null, imageBody()), 400],
    ["an invalid field", (s) => creation(`k-${s}-00004`, imageBody({ count: 0 })), 422],
    ["a body that is not an object", (s) => creation(`k-${s}-00005`, [1]), 400],
    [
      "a bad callback URL (refused by the service)",
      (s) => creation(`k-${s}-00006`, imageBody({ callback_url: "https://127.0.0.1/x" })),
      400,
    ],
    ["another media type", (s) => creation(`k-${s}-00007`, imageBody(), { "content-type": "text/plain" }), 415],
    ["a body over 1 MiB", (s) => creation(`k-${s}-00008`, JSON.parse(big)), 413],
    [
      "Prefer without a wait (the app's, accepted)",
      (s) => creation(`k-${s}-00009`, imageBody(), { prefer: "respond-async" }),
      201,
    ],
    [
      "a query string (the app's, accepted)",
      (s) => ({ ...creation(`k-${s}-00010`, imageBody()), path: `${CREATE}?a=1` }),
      201,
    ],
  ])("%s: the app's answer (%#), handed on once", async (_name, make, status) => {
    const { answer, handed } = await both(make);
    expect(answer.status).toBe(status);
    expect(handed).toBe(1);
  });

  it("a key used again with another body: the app's 409", async () => {
    await both((s) => creation(`reuse-${s}-0001`, imageBody()));
    const { answer, handed } = await both((s) => creation(`reuse-${s}-0001`, imageBody({ prompt: "another one" })));
    expect(answer.status).toBe(409);
    expect(JSON.parse(answer.body)).toEqual({
      error: {
        code: "idempotency_key_reused",
        message: "This Idempotency-Key was already used with a different request. Use a new key for a new request.",
        request_id: "req_ID",
      },
    });
    expect(handed).toBe(1);
  });

  it("writes the app's request line and counts under the app's labels", async () => {
    const counted = async () =>
      Number(
        /genrelay_http_requests_total\{route="\/openapi\/v1\/images\/generations",method="POST",status="201"\} (\d+)/.exec(
          (await t.relay.metrics.exposition()).body,
        )?.[1] ?? 0,
      );
    const before = await counted();
    lines.length = 0;
    await both((s) => creation(`line-${s}-0001`, imageBody()));
    expect(await counted()).toBe(before + 2);
    const requestLines = lines.filter((line) => line.msg === "request");
    expect(requestLines).toHaveLength(2);
    const [d, p] = requestLines.map(({ request_id, time, ms, ...rest }) => {
      expect(request_id).toMatch(/^req_[\w-]{16}$/);
      expect(typeof ms).toBe("number");
      expect(typeof time).toBe("string");
      return rest;
    });
    expect(d).toEqual(p);
    expect(d).toMatchObject({ level: "info", method: "POST", path: CREATE, status: 201 });
  });
});

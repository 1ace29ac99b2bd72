import { Readable } from "node:stream";
import { Agent, request } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import { MAX_BODY_BYTES, MAX_JSON_DEPTH } from "../../src/http/middleware.js";
import { servedRelayPerFile } from "../helpers/served.js";

/**
 * Request bounds by default (issue #38 item 1; docs/contract.md, "Isolation"): every operation
 * /openapi.json lists with POST, PUT or PATCH gets the 1 MiB body limit, enforced while the body
 * streams, and the nesting bound, without being listed anywhere. The operations come from the
 * served document, so a route added tomorrow is probed the day it is added; a route registered
 * here outside the document stands for one someone forgot to document.
 */
const UNLISTED = "/openapi/v1/a-route-added-tomorrow";

// Registered before the first request (the router is built then): no list names it.
const served = servedRelayPerFile({ RELAY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64") }, "bounds", (t) =>
  t.relay.app.post(UNLISTED, (c) => c.json({ reached: true })),
);
const agent = new Agent({ connections: 4 });
afterAll(() => agent.close());

type Doc = { paths: Record<string, Record<string, { requestBody?: unknown; responses: Record<string, unknown> }>> };

async function bodyOperations(): Promise<{ method: string; path: string; documented: string[] }[]> {
  const doc = (await (await served.t.relay.app.request("/openapi.json")).json()) as Doc;
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    ["post", "put", "patch"]
      .filter((m) => item[m])
      .map((m) => ({
        method: m.toUpperCase(),
        path: path.replace(/\{[^}]+\}/g, "x1"),
        documented: Object.keys(item[m]!.responses),
      })),
  );
}

/** 1 MiB + 1 bytes of JSON, declared up front or as a chunked stream of unknown length. */
function oneByteTooMany(chunked: boolean): Buffer | Readable {
  const json = Buffer.from(`{"prompt":"${"a".repeat(MAX_BODY_BYTES + 1 - '{"prompt":""}'.length)}"}`);
  expect(json.length).toBe(MAX_BODY_BYTES + 1);
  if (!chunked) return json;
  return Readable.from(
    (function* () {
      for (let i = 0; i < json.length; i += 64 * 1024) yield json.subarray(i, i + 64 * 1024);
    })(),
  );
}

async function send(method: string, path: string, body: Buffer | Readable | string) {
  const res = await request(`${served.origin}${path}`, {
    method: method as "POST",
    dispatcher: agent,
    headers: {
      authorization: `Bearer ${served.apiKey}`,
      "content-type": "application/json",
      "idempotency-key": "bounds-key-0001",
    },
    body,
  });
  return { status: res.statusCode, headers: res.headers, json: (await res.body.json()) as unknown };
}

describe("every POST/PUT/PATCH is bounded without being listed (issue #38 item 1)", () => {
  it("the served document has body operations, and each documents 413 and 415", async () => {
    const ops = await bodyOperations();
    expect(ops.length).toBeGreaterThanOrEqual(10);
    for (const op of ops)
      expect(op.documented, `${op.method} ${op.path}`).toEqual(expect.arrayContaining(["413", "415"]));
  });

  it.each([
    ["declared with Content-Length", false],
    ["chunked", true],
  ])("1 MiB + 1 %s is 413 payload_too_large with Connection: close on every operation", async (_n, chunked) => {
    const ops = [...(await bodyOperations()), { method: "POST", path: UNLISTED }];
    for (const op of ops) {
      const res = await send(op.method, op.path, oneByteTooMany(chunked));
      expect({ op: `${op.method} ${op.path}`, status: res.status, body: res.json }).toEqual({
        op: `${op.method} ${op.path}`,
        status: 413,
        body: {
          error: {
            code: "payload_too_large",
            message: "The request body is larger than 1 MiB.",
            request_id: res.headers["x-request-id"],
          },
        },
      });
      expect(res.headers.connection, `${op.method} ${op.path}`).toBe("close");
    }
  });

  it(`a body nested deeper than ${MAX_JSON_DEPTH} levels is refused with a clear error on every operation`, async () => {
    const deep = `${"[".repeat(MAX_JSON_DEPTH + 1)}${"]".repeat(MAX_JSON_DEPTH + 1)}`;
    const ops = [...(await bodyOperations()), { method: "POST", path: UNLISTED }];
    for (const op of ops) {
      const res = await send(op.method, op.path, deep);
      expect({ op: `${op.method} ${op.path}`, status: res.status, body: res.json }).toEqual({
        op: `${op.method} ${op.path}`,
        status: 400,
        body: {
          error: {
            code: "invalid_request",
            message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`,
            request_id: res.headers["x-request-id"],
          },
        },
      });
    }
  });

  it("a body at the limits still reaches its route", async () => {
    const atDepth = `${"[".repeat(MAX_JSON_DEPTH)}${"]".repeat(MAX_JSON_DEPTH)}`;
    expect(await send("POST", UNLISTED, atDepth)).toMatchObject({ status: 200, json: { reached: true } });
    const json = Buffer.from(`{"prompt":"${"a".repeat(MAX_BODY_BYTES - '{"prompt":""}'.length)}"}`);
    expect(await send("POST", UNLISTED, json)).toMatchObject({ status: 200, json: { reached: true } });
  });
});

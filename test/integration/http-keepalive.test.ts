import { serve } from "@hono/node-server";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { Pool } from "undici";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createTestRelay, imageBody, type TestRelay } from "../helpers/relay.js";

/**
 * The relay behind a real node-server on loopback, with undici's pooled client on ONE connection:
 * app.request cannot see what a 413 does to the keep-alive connection that follows it.
 */
let t: TestRelay;
let server: Server;
let pool: Pool;
let apiKey: string;

beforeEach(async () => {
  t = createTestRelay();
  apiKey = t.client().apiKey;
  server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: t.relay.app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s as Server));
  });
  pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 1 });
});

afterEach(async () => {
  await pool.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await t.close();
});

const OVERSIZED = Buffer.alloc(2 * 1024 * 1024, "a");

/** A JSON body over 1 MiB, either with Content-Length or chunked (a stream of unknown length). */
function oversized(chunked: boolean): Buffer | Readable {
  const json = Buffer.concat([Buffer.from('{"prompt":"'), OVERSIZED, Buffer.from('"}')]);
  if (!chunked) return json;
  return Readable.from(
    (function* () {
      for (let i = 0; i < json.length; i += 64 * 1024) yield json.subarray(i, i + 64 * 1024);
    })(),
  );
}

describe.each([
  ["with Content-Length", false],
  ["chunked", true],
])("a 413 on a pooled keep-alive connection (%s)", (_name, chunked) => {
  it("answers 413 with Connection: close, and the next 10 requests on the same pool all succeed", async () => {
    const refused = await pool.request({
      path: "/openapi/v1/images/generations",
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "idempotency-key": "too-big-key-1",
      },
      body: oversized(chunked),
    });
    expect(refused.statusCode).toBe(413);
    expect(refused.headers.connection).toBe("close");
    expect(await refused.body.json()).toEqual({
      error: {
        code: "payload_too_large",
        message: "The request body is larger than 1 MiB.",
        request_id: expect.stringMatching(/^req_/),
      },
    });

    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      // Alternate a read and a creation, so both a bodiless and a body-reading request follow the 413.
      const res =
        i % 2 === 0
          ? await pool.request({
              path: "/openapi/v1/tasks",
              method: "GET",
              headers: { authorization: `Bearer ${apiKey}` },
            })
          : await pool.request({
              path: "/openapi/v1/images/generations",
              method: "POST",
              headers: {
                authorization: `Bearer ${apiKey}`,
                "content-type": "application/json",
                "idempotency-key": `after-413-key-${i}`,
              },
              body: JSON.stringify(imageBody()),
            });
      statuses.push(res.statusCode);
      await res.body.dump();
    }
    expect(statuses).toEqual([200, 201, 200, 201, 200, 201, 200, 201, 200, 201]);
  });
});

it("a body within the limit keeps the connection alive", async () => {
  const res = await pool.request({
    path: "/openapi/v1/images/generations",
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": "small-key-1",
    },
    body: JSON.stringify(imageBody()),
  });
  expect(res.statusCode).toBe(201);
  expect(res.headers.connection).toBe("keep-alive");
  await res.body.dump();
});

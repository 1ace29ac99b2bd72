import { serve } from "@hono/node-server";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { createTestRelay, imageBody, type TestRelay } from "../helpers/relay.js";

/**
 * Location of a created task: under PUBLIC_BASE_URL when set, else from the request. Over a real
 * server, because only there does the request URL come from the caller's Host header.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function relayOnLoopback(env: Record<string, string>): Promise<{ t: TestRelay; apiKey: string; origin: string }> {
  const t = createTestRelay(env);
  cleanups.push(() => t.close());
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: t.relay.app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s as Server));
  });
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  cleanups.push(async () => server.closeAllConnections());
  return { t, apiKey: t.client().apiKey, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function create(
  origin: string,
  apiKey: string,
  key: string,
  host?: string,
): Promise<{ status: number; location: string; id: string }> {
  const res = await request(`${origin}/openapi/v1/images/generations`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": key,
      ...(host ? { host } : {}),
    },
    body: JSON.stringify(imageBody()),
  });
  const json = (await res.body.json()) as { data: { id: string } };
  return { status: res.statusCode, location: String(res.headers.location), id: json.data.id };
}

describe("Location of a created task", () => {
  it("without PUBLIC_BASE_URL is built from the request", async () => {
    const { apiKey, origin } = await relayOnLoopback({});
    const created = await create(origin, apiKey, "location-key-1");
    expect(created.status).toBe(201);
    expect(created.location).toBe(`${origin}/openapi/v1/tasks/${created.id}`);
  });

  it("with PUBLIC_BASE_URL (and a path prefix) is under it, and the read it names answers", async () => {
    const { t, apiKey, origin } = await relayOnLoopback({ PUBLIC_BASE_URL: "https://relay.example.com/genrelay/" });
    const created = await create(origin, apiKey, "location-key-2");
    expect(created.status).toBe(201);
    expect(created.location).toBe(`https://relay.example.com/genrelay/openapi/v1/tasks/${created.id}`);
    const read = await t.request(apiKey, `/openapi/v1/tasks/${created.id}`);
    expect(read.status).toBe(200);
  });

  it("a hostile Host header reaches Location only when PUBLIC_BASE_URL is unset", async () => {
    const open = await relayOnLoopback({});
    const reflected = await create(open.origin, open.apiKey, "location-key-3", "evil.example");
    expect(reflected.location).toBe(`http://evil.example/openapi/v1/tasks/${reflected.id}`);

    const pinned = await relayOnLoopback({ PUBLIC_BASE_URL: "https://relay.example.com" });
    const created = await create(pinned.origin, pinned.apiKey, "location-key-4", "evil.example");
    expect(created.status).toBe(201);
    expect(created.location).toBe(`https://relay.example.com/openapi/v1/tasks/${created.id}`);
  });

  it("a replay (200) carries the same Location", async () => {
    const { apiKey, origin } = await relayOnLoopback({ PUBLIC_BASE_URL: "https://relay.example.com" });
    const first = await create(origin, apiKey, "location-key-5");
    const again = await create(origin, apiKey, "location-key-5", "evil.example");
    expect(again.status).toBe(200);
    expect(again.location).toBe(first.location);
  });
});

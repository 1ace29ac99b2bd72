import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

/** GET / points a newcomer to /docs, /dashboard and /openapi.json (issue #39: it was a bare 404). */
let t: TestRelay;
beforeAll(() => {
  t = createTestRelay();
});
afterAll(async () => {
  await t.close();
});

describe("GET /", () => {
  it("answers JSON pointers without an API key", async () => {
    const res = await t.relay.app.request("http://relay.test/");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      name: "genrelay",
      description: "Webhooks for an asynchronous image and video generation API.",
      docs: "/docs",
      dashboard: "/dashboard",
      openapi: "/openapi.json",
    });
  });

  it("answers a browser with links, and every pointer answers", async () => {
    const res = await t.relay.app.request("http://relay.test/", { headers: { Accept: "text/html,*/*;q=0.8" } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const page = await res.text();
    for (const path of ["/docs", "/dashboard", "/openapi.json"]) {
      expect(page).toContain(`href="${path}"`);
      const target = await t.relay.app.request(`http://relay.test${path}`);
      expect(target.status, path).toBeLessThan(400);
    }
  });
});

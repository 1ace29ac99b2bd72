import { afterEach, describe, expect, it } from "vitest";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

/** METRICS_TOKEN: /metrics answers only to `Authorization: Bearer <token>` when it is set. */
let t: TestRelay;
afterEach(async () => {
  await t.close();
});

const TOKEN = "prom-scrape-9f2c1d";

const unauthorized = {
  error: {
    code: "invalid_api_key",
    message: "Send Authorization: Bearer <token> with the METRICS_TOKEN token.",
    request_id: expect.stringMatching(/^req_/),
  },
};

describe("/metrics with METRICS_TOKEN", () => {
  it.each([
    ["no Authorization", undefined],
    ["a wrong token", `Bearer ${TOKEN}x`],
    ["a prefix of the token", `Bearer ${TOKEN.slice(0, -1)}`],
    ["an empty bearer", "Bearer "],
    ["the token without Bearer", TOKEN],
    ["Basic credentials", `Basic ${Buffer.from(`prom:${TOKEN}`).toString("base64")}`],
  ])("refuses %s with 401 and the error envelope", async (_name, authorization) => {
    t = createTestRelay({ METRICS_TOKEN: TOKEN });
    const res = await t.request(null, "/metrics", authorization ? { headers: { Authorization: authorization } } : {});
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe('Bearer realm="METRICS_TOKEN"');
    expect(await res.json()).toEqual(unauthorized);
  });

  it("answers the right token with the exposition", async () => {
    t = createTestRelay({ METRICS_TOKEN: TOKEN });
    const res = await t.request(null, "/metrics", { headers: { Authorization: `bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(await res.text()).toMatch(/^# HELP genrelay_/m);
  });

  it("an API client's key is not the metrics token", async () => {
    t = createTestRelay({ METRICS_TOKEN: TOKEN });
    const { apiKey } = t.client();
    expect((await t.request(apiKey, "/metrics")).status).toBe(401);
  });

  it("leaves /healthz and /readyz open", async () => {
    t = createTestRelay({ METRICS_TOKEN: TOKEN });
    expect((await t.request(null, "/healthz")).status).toBe(200);
    expect((await t.request(null, "/readyz")).status).not.toBe(401);
  });

  it("without METRICS_TOKEN, /metrics stays open", async () => {
    t = createTestRelay();
    const res = await t.request(null, "/metrics");
    expect(res.status).toBe(200);
    expect(await res.text()).toMatch(/^# HELP genrelay_/m);
  });
});

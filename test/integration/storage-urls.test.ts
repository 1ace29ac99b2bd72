import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bucketBody, createTestRelay, type TestRelay } from "../helpers/relay.js";

/**
 * Issue #38 item 8: a bucket's public_base_url is judged by parsing (src/net/base-url.ts), not by a
 * string check: `https://evil.example/phish?` has an empty query that url.search reports as "", and
 * would have turned every file link on the relay's origin into a redirect to the tenant's page.
 */
let t: TestRelay;
let apiKey: string;
beforeAll(() => {
  t = createTestRelay({ RELAY_ENCRYPTION_KEY: Buffer.alloc(32, 3).toString("base64") });
  apiKey = t.client("storage-urls").apiKey;
});
afterAll(async () => {
  await t.close();
});

const bucket = bucketBody;

describe("PUT /openapi/v1/storage judges URLs by parsing them", () => {
  it.each([
    ["https://evil.example/phish?", "must not have a query or fragment (not even an empty ? or #)"],
    ["https://cdn.example.com/files?v=1", "must not have a query or fragment (not even an empty ? or #)"],
    ["https://cdn.example.com/files#", "must not have a query or fragment (not even an empty ? or #)"],
    ["https://cdn.example.com/files#top", "must not have a query or fragment (not even an empty ? or #)"],
    ["https://user:pw@cdn.example.com/files", "contains credentials (user or password)"],
  ])("public_base_url %s is refused: %s", async (url, message) => {
    const res = await t.request(apiKey, "/openapi/v1/storage", {
      method: "PUT",
      json: bucket({ public_base_url: url }),
    });
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 422,
      body: {
        error: {
          code: "validation_error",
          message: "The bucket setting is not valid.",
          request_id: res.headers.get("x-request-id"),
          details: [{ field: "public_base_url", message }],
        },
      },
    });
  });

  it("an endpoint with an empty query is refused as not an origin", async () => {
    const res = await t.request(apiKey, "/openapi/v1/storage", {
      method: "PUT",
      json: bucket({ endpoint: "https://s3.eu-west-1.amazonaws.com/?" }),
    });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { error: { details: unknown } }).error.details).toEqual([
      { field: "endpoint", message: "must be an origin such as https://s3.us-east-1.amazonaws.com (no path or query)" },
    ]);
  });

  it("a plain base URL is kept, without its trailing slash", async () => {
    const res = await t.request(apiKey, "/openapi/v1/storage", {
      method: "PUT",
      json: bucket({ public_base_url: "https://cdn.example.com/files/" }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { public_base_url: string } }).data.public_base_url).toBe(
      "https://cdn.example.com/files",
    );
  });
});

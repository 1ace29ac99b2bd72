import { createConfig, lintFromString } from "@redocly/openapi-core";
import { describe, expect, it } from "vitest";
import { typeErrors } from "../helpers/openapi-types.js";
import { imageBody, type TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * docs/contract.md, "The published contract": /openapi.json passes Redocly's recommended ruleset,
 * names every operation for SDKs, declares its servers and each operation's security, documents the
 * response headers the relay really sends, and the relay answers a method a path does not take
 * with 405 and Allow.
 */
const suite = upstreamSuite();

interface Operation {
  operationId?: string;
  security?: unknown[];
  parameters?: { name: string; in: string; example?: unknown; schema?: { pattern?: string } }[];
  responses: Record<
    string,
    { headers?: Record<string, { $ref?: string }>; content?: Record<string, { schema?: { $ref?: string } }> }
  >;
}
type Doc = {
  servers?: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  webhooks: Record<string, Record<string, Operation>>;
  components: {
    headers?: Record<string, unknown>;
    schemas: Record<string, { properties?: Record<string, { enum?: string[] }> }>;
  };
};

const METHODS = ["get", "put", "post", "delete", "patch"];

async function served(t: TestRelay): Promise<Doc> {
  return (await (await t.request(null, "/openapi.json")).json()) as Doc;
}

function operations(doc: Doc): { where: string; path: string; method: string; op: Operation }[] {
  const of = (where: string, items: Record<string, Record<string, Operation>>) =>
    Object.entries(items).flatMap(([path, item]) =>
      METHODS.filter((m) => item[m]).map((method) => ({ where, path, method, op: item[method]! })),
    );
  return [...of("paths", doc.paths), ...of("webhooks", doc.webhooks)];
}

const OPERATION_IDS: Record<string, string> = {
  "post /openapi/v1/images/generations": "createImageTask",
  "post /openapi/v1/videos/generations": "createVideoTask",
  "get /openapi/v1/tasks/{id}": "getTask",
  "get /openapi/v1/tasks": "listTasks",
  "post /openapi/v1/tasks/{id}/cancel": "cancelTask",
  "get /openapi/v1/tasks/{id}/deliveries": "listTaskDeliveries",
  "post /openapi/v1/tasks/{id}/redeliver": "redeliverTask",
  "get /openapi/v1/webhooks/hosts": "listFailingHosts",
  "post /openapi/v1/webhooks/hosts/{host}/retry": "retryHost",
  "post /openapi/v1/webhooks/test": "sendTestWebhook",
  "post /openapi/v1/webhooks/secret/rotate": "rotateWebhookSecret",
  "get /openapi/v1/events": "listEvents",
  "get /openapi/v1/tasks/{id}/events": "streamTaskEvents",
  "post /openapi/v1/tasks/{id}/stream-tokens": "createStreamToken",
  "get /openapi/v1/events/stream": "streamEvents",
  "post /openapi/v1/deliveries/recover": "recoverDeliveries",
  "get /openapi/v1/usage": "getUsage",
  "get /openapi/v1/webhooks/settings": "getWebhookSettings",
  "get /openapi/v1/webhooks/jwks/{client_id}": "getWebhookJwks",
  "put /openapi/v1/webhooks/settings": "updateWebhookSettings",
  "post /openapi/v1/webhooks/endpoints": "createWebhookEndpoint",
  "get /openapi/v1/webhooks/endpoints": "listWebhookEndpoints",
  "get /openapi/v1/webhooks/endpoints/{id}": "getWebhookEndpoint",
  "delete /openapi/v1/webhooks/endpoints/{id}": "deleteWebhookEndpoint",
  "get /openapi/v1/storage": "getStorage",
  "put /openapi/v1/storage": "setStorage",
  "delete /openapi/v1/storage": "deleteStorage",
  "get /openapi/v1/models": "listModels",
  "get /healthz": "checkLiveness",
  "get /readyz": "checkReadiness",
  "get /openapi.json": "getOpenApiDocument",
  "get /": "getRoot",
  "get /files/{token}": "getFileLink",
  "post task.processing": "onTaskProcessing",
  "post task.succeeded": "onTaskSucceeded",
  "post task.failed": "onTaskFailed",
  "post task.canceled": "onTaskCanceled",
  "post ping": "onPing",
  "post endpoint.failing": "onEndpointFailing",
  "post endpoint.recovered": "onEndpointRecovered",
  "post delivery.exhausted": "onDeliveryExhausted",
};

describe("/openapi.json against Redocly's recommended ruleset", () => {
  it("has no errors; its only warnings are the probes and this document having no 4xx answer", async () => {
    const { t } = suite.setup();
    const source = await (await t.request(null, "/openapi.json")).text();
    const problems = await lintFromString({
      source,
      absoluteRef: "openapi.json",
      config: await createConfig({ extends: ["recommended"] }),
    });
    const shown = problems.map((p) => `${p.severity} ${p.ruleId} ${p.location[0]?.pointer ?? ""}: ${p.message}`);
    expect(
      shown.filter((p) => p.startsWith("error")),
      "errors",
    ).toEqual([]);
    // GET /healthz and /readyz take no input and no key, and are exempt from the per-address limit on
    // public routes (GET / and /openapi.json answer its 429): no client error exists to document, and
    // inventing one to quiet operation-4xx-response would make the document lie. GET /files/{token} is a
    // redirect (GET and HEAD): its answer is 302, never a 2xx.
    expect(shown.filter((p) => p.startsWith("warn")).sort()).toEqual(
      [
        ...["/healthz", "/readyz"].map(
          (path) =>
            `warn operation-4xx-response #/paths/${path.replaceAll("/", "~1")}/get/responses: Operation must have at least one \`4XX\` response.`,
        ),
        "warn operation-2xx-response #/paths/~1files~1{token}/get/responses: Operation must have at least one `2XX` response.",
        "warn operation-2xx-response #/paths/~1files~1{token}/head/responses: Operation must have at least one `2XX` response.",
      ].sort(),
    );
  }, 60_000);

  it("the same ruleset finds what it should: with no servers and an operation's security gone, it errs", async () => {
    const { t } = suite.setup();
    const doc = await served(t);
    delete doc.servers;
    delete doc.paths["/healthz"]!.get!.security;
    const problems = await lintFromString({
      source: JSON.stringify(doc),
      absoluteRef: "openapi.json",
      config: await createConfig({ extends: ["recommended"] }),
    });
    expect(
      problems
        .filter((p) => p.severity === "error")
        .map((p) => p.ruleId)
        .sort(),
    ).toEqual(["no-empty-servers", "security-defined"]);
  }, 60_000);
});

describe("operations, servers and security", () => {
  it("every operation (webhooks too) has its own operationId, a verb an SDK can use", async () => {
    const { t } = suite.setup();
    const ids = Object.fromEntries(operations(await served(t)).map((o) => [`${o.method} ${o.path}`, o.op.operationId]));
    expect(ids).toEqual(OPERATION_IDS);
    expect(new Set(Object.values(ids)).size).toBe(Object.keys(ids).length);
  });

  it("declares its server: / (wherever the document was fetched), or PUBLIC_BASE_URL when set", async () => {
    const { t } = suite.setup();
    expect((await served(t)).servers).toEqual([{ url: "/", description: "This relay" }]);
    const { t: behindProxy } = suite.setup({ PUBLIC_BASE_URL: "https://relay.example.com/genrelay" });
    expect((await served(behindProxy)).servers).toEqual([
      { url: "https://relay.example.com/genrelay", description: "This relay (PUBLIC_BASE_URL)" },
    ]);
  });

  it("declares security on every operation: the bearer key under /openapi/v1 but for the published keys, none for the probes, this document and the webhooks", async () => {
    const { t } = suite.setup();
    for (const o of operations(await served(t))) {
      const bearer =
        o.where === "paths" && o.path.startsWith("/openapi/v1/") && !o.path.startsWith("/openapi/v1/webhooks/jwks/");
      const expected = bearer ? [{ bearerAuth: [] }] : [];
      expect(o.op.security, `${o.method} ${o.path}`).toEqual(expected);
    }
  });

  it("gives the two creation examples different Idempotency-Keys, each one the header accepts", async () => {
    const { t } = suite.setup();
    const doc = await served(t);
    const keys = ["/openapi/v1/images/generations", "/openapi/v1/videos/generations"].map((path) => {
      const header = doc.paths[path]!.post!.parameters!.find((p) => p.name === "Idempotency-Key")!;
      expect(String(header.example)).toMatch(new RegExp(header.schema!.pattern!));
      return header.example;
    });
    expect(new Set(keys).size).toBe(2);
  });

  it("lists every error code the relay answers with, method_not_allowed included", async () => {
    const { t } = suite.setup();
    const codes = (await served(t)).components.schemas.Error!.properties as unknown as {
      error: { properties: { code: { enum: string[] } } };
    };
    expect(codes.error.properties.code.enum).toEqual(
      expect.arrayContaining(["validation_error", "not_found", "method_not_allowed", "storage_unavailable"]),
    );
  });
});

describe("response headers", () => {
  it("are documented: X-Request-Id on every answer, Location and Idempotent-Replayed on creations, Retry-After on every 429 and 503 error", async () => {
    const { t } = suite.setup();
    const doc = await served(t);
    expect(Object.keys(doc.components.headers ?? {}).sort()).toEqual([
      "Age",
      "Cache-Control",
      "ETag",
      "Idempotent-Replayed",
      "Location",
      "Preference-Applied",
      "Retry-After",
      "X-Request-Id",
    ]);
    const headers = (r: { headers?: Record<string, { $ref?: string }> }) => Object.keys(r.headers ?? {});
    for (const o of operations(doc).filter((x) => x.where === "paths")) {
      for (const [status, response] of Object.entries(o.op.responses)) {
        const label = `${o.method} ${o.path} ${status}`;
        expect(headers(response), label).toContain("X-Request-Id");
        for (const ref of Object.values(response.headers ?? {}))
          expect(ref.$ref, label).toMatch(/^#\/components\/headers\//);
        const envelope = response.content?.["application/json"]?.schema?.$ref === "#/components/schemas/Error";
        if (envelope && (status === "429" || status === "503"))
          expect(headers(response), label).toContain("Retry-After");
        if (o.path.endsWith("/generations") && (status === "200" || status === "201"))
          expect(headers(response), label).toEqual(expect.arrayContaining(["Location", "Idempotent-Replayed"]));
      }
    }
  });

  it("are the ones sent: a creation's Location and Idempotent-Replayed, a 429's Retry-After, everyone's X-Request-Id", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client("one-waiting", { maxWaiting: 1 });
    const create = (key: string) =>
      t.request(apiKey, "/openapi/v1/images/generations", { method: "POST", json: imageBody(), idempotencyKey: key });
    const first = await create("headers-key-1");
    expect(first.status).toBe(201);
    expect(first.headers.get("location")).toMatch(/^http:\/\/relay\.test\/openapi\/v1\/tasks\/task_/);
    expect(first.headers.get("idempotent-replayed")).toBe("false");
    expect((await create("headers-key-1")).headers.get("idempotent-replayed")).toBe("true");
    const limited = await create("headers-key-2");
    expect(limited.status).toBe(429);
    expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
    for (const res of [first, limited, await t.request(null, "/healthz"), await t.request(null, "/openapi.json")])
      expect(res.headers.get("x-request-id")).toMatch(/^req_/);
  });
});

describe("405 method_not_allowed", () => {
  it("answers a method a known path does not take, with Allow listing the ones it does (every documented path)", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const doc = await served(t);
    let checked = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      const documented = METHODS.filter((m) => item[m]).map((m) => m.toUpperCase());
      const allow = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
        .filter((m) => documented.includes(m) || (m === "HEAD" && documented.includes("GET")))
        .join(", ");
      const concrete = path.replace(/\{\w+\}/g, "task_01jf3y8k2m9q7r5t3v1w0x6z4a");
      for (const method of ["GET", "POST", "PUT", "PATCH", "DELETE"].filter((m) => !documented.includes(m))) {
        const res = await t.request(apiKey, concrete, { method });
        const label = `${method} ${concrete}`;
        expect(res.status, label).toBe(405);
        expect(res.headers.get("allow"), label).toBe(allow);
        const requestId = res.headers.get("x-request-id");
        expect(await res.json(), label).toEqual({
          error: {
            code: "method_not_allowed",
            message: `${method} is not allowed on ${concrete}; use ${allow}.`,
            request_id: requestId,
          },
        });
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(50);
  });

  it("leaves an unknown path 404 not_found, and a method the path takes untouched", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    for (const [method, path] of [
      ["GET", "/openapi/v1/nothing-here"],
      ["DELETE", "/openapi/v1/tasks/task_1/nothing"],
      ["GET", "/openapi/v1/tasks/"],
      ["POST", "/nowhere"],
    ]) {
      const res = await t.request(apiKey, path!, { method });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(await res.json()).toEqual({
        error: {
          code: "not_found",
          message: `No route ${method} ${path}.`,
          request_id: res.headers.get("x-request-id"),
        },
      });
      expect(res.headers.get("allow")).toBeNull();
    }
    expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(200);
    expect((await t.request(null, "/healthz", { method: "HEAD" })).status).toBe(200);
    expect((await t.request(null, "/docs/assets/nothing.js")).status).toBe(404);
  });

  it("comes after authentication under /openapi/v1: no key is still 401", async () => {
    const { t } = suite.setup();
    const res = await t.request(null, "/openapi/v1/tasks", { method: "DELETE" });
    expect(res.status).toBe(401);
  });
});

describe("a bad path parameter", () => {
  it("is named as one (400 invalid_request), as a bad query parameter is named as one", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const id = `task_${"x".repeat(300)}`;
    const bad = await t.request(apiKey, `/openapi/v1/tasks/${id}`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({
      error: {
        code: "invalid_request",
        message: "A path parameter is invalid.",
        request_id: bad.headers.get("x-request-id"),
        details: [{ field: "id", message: expect.any(String) }],
      },
    });
    const query = await t.request(apiKey, "/openapi/v1/tasks?limit=0");
    expect(query.status).toBe(400);
    expect(((await query.json()) as { error: { message: string } }).error.message).toBe(
      "A query parameter is invalid.",
    );
  });
});

describe("a client built from openapi-typescript's types of /openapi.json", () => {
  const CLIENT = `import type { operations } from "./schema";

type Body<Op extends keyof operations> = operations[Op] extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

export const image: Body<"createImageTask"> = { model: "p-image", mode: "generate", prompt: "a red fox", count: 1, callback_url: "https://hooks.example.com/x" };
export const video: Body<"createVideoTask"> = { model: "v-video", video_mode: "t2v", prompt: "waves at night", callback_events: ["task.succeeded"] };
export const settings: Body<"updateWebhookSettings"> = { notification_url: null, signature: "ed25519" };
export const misspelled: Body<"createImageTask"> = { model: "p-image", mode: "generate", prompt: "a red fox", count: 1, callbak_url: "https://hooks.example.com/x" };
`;

  it("does not compile a misspelled field (callbak_url), and compiles the rest; with additionalProperties: {} the misspelling compiled", async () => {
    const { t } = suite.setup();
    const doc = (await served(t)) as unknown as Record<string, any>;
    const client = { name: "client.ts", source: CLIENT };
    const errors = await typeErrors(doc, client);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(
      /^client\.ts:8 Object literal may only specify known properties, (and|but) 'callbak_url' does not exist in type/,
    );
    // What the document said before: any extra field, which a generated client accepts.
    const loose = structuredClone(doc);
    loose.components.schemas.ImageGenerationRequest.additionalProperties = {};
    expect(await typeErrors(loose, client)).toEqual([]);
  }, 60_000);
});

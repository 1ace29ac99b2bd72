import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";

/**
 * The OpenAPI document is the reference callers read (/docs renders it), so it is checked against
 * the app itself: every route appears, every operation has a summary and a described JSON body,
 * and every status an operation really answers with — provoked here with bad keys, unknown and
 * malformed ids, wrong bodies and bad queries — is one its document lists.
 */

interface Operation {
  summary?: string;
  security?: Record<string, unknown>[];
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<
    string,
    {
      description?: string;
      content?: Record<string, { schema?: Record<string, unknown>; example?: unknown; examples?: unknown }>;
    }
  >;
}
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, unknown> };
};

const METHODS = ["get", "post", "put", "patch", "delete"] as const;
/** Routes that are not part of the API the document describes (also the web dashboard and /docs/assets/…). */
const UNDOCUMENTED = new Set(["/docs", "/metrics"]);

let t: TestRelay;
let doc: Doc;
let apiKey: string;

beforeAll(async () => {
  t = createTestRelay();
  apiKey = t.client("openapi").apiKey;
  const res = await t.relay.app.request("/openapi.json");
  expect(res.status).toBe(200);
  doc = (await res.json()) as Doc;
});
afterAll(async () => {
  await t.close();
});

function operations(): { path: string; method: string; op: Operation }[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({ path, method, op: item[method]! })),
  );
}

const apiOperations = () => operations().filter((o) => o.path.startsWith("/openapi/v1/"));
/** The one /openapi/v1 operation without an API key (docs/contract.md, "Published keys"). */
const PUBLIC_PATHS = new Set(["/openapi/v1/webhooks/jwks/{client_id}"]);
const label = (o: { method: string; path: string }) => `${o.method.toUpperCase()} ${o.path}`;

describe("/openapi.json", () => {
  it("is OpenAPI 3.1 and lists exactly the app's routes (besides /docs and /metrics), itself included", () => {
    expect(doc.openapi).toMatch(/^3\.1\./);
    const registered = new Set(
      t.relay.app.routes
        .filter(
          (r) =>
            r.method !== "ALL" &&
            !r.path.includes("*") &&
            !UNDOCUMENTED.has(r.path) &&
            !/^\/(dashboard|docs)(\/|$)/.test(r.path),
        )
        .map((r) => `${r.method.toLowerCase()} ${r.path.replace(/:(\w+)/g, "{$1}")}`),
    );
    const documented = new Set(operations().map((o) => `${o.method} ${o.path}`));
    expect(registered.size).toBeGreaterThan(10);
    expect(
      [...registered].filter((r) => !documented.has(r)),
      "routes missing from the document",
    ).toEqual([]);
    expect(
      [...documented].filter((d) => !registered.has(d)),
      "documented operations the app does not serve",
    ).toEqual([]);
  });

  it("documents HEAD /files/{token}, and the app answers it as documented (issue #39)", async () => {
    const head = (doc.paths["/files/{token}"] as Record<string, Operation & { operationId?: string }>).head;
    expect(head?.operationId).toBe("headFileLink");
    // 429: the per-address limit every public route answers (http/public-limit.ts).
    expect(Object.keys(head!.responses).sort()).toEqual(["302", "404", "429"]);
    const res = await t.relay.app.request(`http://relay.test/files/${"a".repeat(43)}`, { method: "HEAD" });
    expect(Object.keys(head!.responses)).toContain(String(res.status));
    expect(await res.text()).toBe("");
  });

  it("gives every operation a summary, and every JSON body (or event stream) a schema or an example", () => {
    for (const o of operations()) {
      expect(o.op.summary?.trim(), `${label(o)} has a summary`).toBeTruthy();
      expect(Object.keys(o.op.responses).length, `${label(o)} documents a response`).toBeGreaterThan(0);
      for (const [status, response] of Object.entries(o.op.responses)) {
        expect(response.description?.trim(), `${label(o)} ${status} has a description`).toBeTruthy();
        // A live stream (docs/contract.md, "Live progress") is text/event-stream, described as such.
        const json = response.content?.["application/json"] ?? response.content?.["text/event-stream"];
        if (!response.content) continue;
        expect(json, `${label(o)} ${status} answers JSON`).toBeDefined();
        const described =
          (json!.schema !== undefined && Object.keys(json!.schema).length > 0) ||
          json!.example !== undefined ||
          json!.examples !== undefined;
        expect(described, `${label(o)} ${status} has a schema or an example`).toBe(true);
      }
    }
  });

  it("documents, on every /openapi/v1 operation, bearer auth, 401, 500 and the error envelope", () => {
    expect(apiOperations().length).toBeGreaterThanOrEqual(13);
    expect(doc.components?.schemas?.Error).toBeDefined();
    for (const o of apiOperations()) {
      const open = PUBLIC_PATHS.has(o.path);
      expect(o.op.security, `${label(o)} requires the bearer key, unless public`).toEqual(
        open ? [] : [{ bearerAuth: [] }],
      );
      expect(Object.keys(o.op.responses), `${label(o)} documents 401 (unless public) and 500`).toEqual(
        expect.arrayContaining(open ? ["500"] : ["401", "500"]),
      );
      if (open) expect(Object.keys(o.op.responses), `${label(o)} is public`).not.toContain("401");
      for (const [status, response] of Object.entries(o.op.responses)) {
        if (Number(status) < 400) continue;
        expect(response.content?.["application/json"]?.schema, `${label(o)} ${status} is the error envelope`).toEqual({
          $ref: "#/components/schemas/Error",
        });
      }
    }
  });

  describe("every status an operation answers with is documented", () => {
    interface Probe {
      name: string;
      path: string;
      init: RequestInit;
    }

    const LONG_ID = `task_${"x".repeat(300)}`;
    const BIG_BODY = JSON.stringify({ url: "https://example.com/hook", padding: "x".repeat(1024 * 1024 + 10) });

    /** Requests that provoke the errors an operation can give, built from what the document says it takes. */
    function probes(path: string, method: string, op: Operation): Probe[] {
      const params = op.parameters ?? [];
      const hasPathId = params.some((p) => p.in === "path");
      const fill = (id: string) => path.replace(/\{(\w+)\}/g, () => encodeURIComponent(id));
      const concrete = fill("task_01jf3y8k2m9q7r5t3v1w0x6z4a");
      const auth = { Authorization: `Bearer ${apiKey}` };
      const json = { ...auth, "Content-Type": "application/json", "Idempotency-Key": "probe-key-0001" };
      const m = method.toUpperCase();
      const list: Probe[] = [
        { name: "no API key", path: concrete, init: { method: m } },
        {
          name: "an unknown API key",
          path: concrete,
          init: { method: m, headers: { Authorization: "Bearer grk_unknown_key_for_probe" } },
        },
        {
          name: "a well-formed request",
          path: concrete,
          init: { method: m, headers: json, ...(op.requestBody ? { body: "{}" } : {}) },
        },
      ];
      if (hasPathId) {
        list.push({
          name: "an id far too long",
          path: fill(LONG_ID),
          init: { method: m, headers: json, ...(op.requestBody ? { body: "{}" } : {}) },
        });
      }
      for (const q of params.filter((p) => p.in === "query")) {
        list.push({
          name: `an invalid ${q.name}`,
          path: `${concrete}?${q.name}=!!invalid!!`,
          init: { method: m, headers: auth },
        });
      }
      for (const h of params.filter((p) => p.in === "header" && p.required)) {
        const headers: Record<string, string> = { ...json };
        delete headers[h.name];
        list.push({ name: `no ${h.name} header`, path: concrete, init: { method: m, headers, body: "{}" } });
      }
      if (op.requestBody) {
        list.push(
          {
            name: "a text/plain body",
            path: concrete,
            init: { method: m, headers: { ...json, "Content-Type": "text/plain" }, body: "hello" },
          },
          { name: "malformed JSON", path: concrete, init: { method: m, headers: json, body: "{not json" } },
          { name: "a JSON array", path: concrete, init: { method: m, headers: json, body: "[1,2]" } },
          {
            name: "wrong field types",
            path: concrete,
            init: {
              method: m,
              headers: json,
              body: JSON.stringify({ model: 1, prompt: 2, url: 3, since: "yesterday", count: 5 }),
            },
          },
          {
            name: "a private callback URL",
            path: concrete,
            init: {
              method: m,
              headers: json,
              body: JSON.stringify({
                url: "https://127.0.0.1/hook",
                callback_url: "https://127.0.0.1/hook",
                model: "p-image",
                mode: "generate",
                prompt: "a red fox",
                count: 1,
              }),
            },
          },
          { name: "a body over 1 MiB", path: concrete, init: { method: m, headers: json, body: BIG_BODY } },
        );
      }
      return list;
    }

    it.each(["get", "post"])("%s operations under /openapi/v1", async (method) => {
      const seen: string[] = [];
      for (const o of apiOperations().filter((x) => x.method === method && x.path !== "/openapi/v1/models")) {
        for (const probe of probes(o.path, o.method, o.op)) {
          const res = await t.relay.app.request(`http://relay.test${probe.path}`, probe.init);
          const status = String(res.status);
          seen.push(`${label(o)} ${probe.name}: ${status}`);
          expect(
            Object.keys(o.op.responses),
            `${label(o)} with ${probe.name} answered ${status}, which its document does not list`,
          ).toContain(status);
          if (res.status >= 400) {
            const body = (await res.json()) as { error?: { code?: string; request_id?: string } };
            expect(body.error?.code, `${label(o)} with ${probe.name}: error envelope`).toEqual(expect.any(String));
            expect(body.error?.request_id).toMatch(/^req_/);
          }
        }
      }
      // The probes reach the interesting answers, not only 401s.
      const statuses = new Set(seen.map((s) => s.split(": ")[1]));
      for (const expected of method === "post"
        ? ["401", "400", "404", "413", "415", "422"]
        : ["401", "400", "404", "200"])
        expect(statuses).toContain(expected);
    });

    it("GET /openapi/v1/models without a key is 401, as documented", async () => {
      const res = await t.relay.app.request("http://relay.test/openapi/v1/models");
      expect(res.status).toBe(401);
      expect(Object.keys(doc.paths["/openapi/v1/models"]!.get!.responses)).toContain("401");
    });
  });
});

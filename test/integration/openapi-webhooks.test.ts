import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { TEST_EVENT_TYPES } from "../../src/services/sample-events.js";
import { webhookDocument } from "../../src/http/webhook-schemas.js";
import { webhookValidators } from "../helpers/webhook-schema.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * docs/contract.md, "Typed bodies": /openapi.json has a webhooks entry per event type with its exact body schema.
 * The shared receiver (test/helpers/receiver.ts) validates every body it gets against these with
 * ajv; this file checks the served document and the validator itself.
 */
const suite = upstreamSuite();
const TYPES = [
  "task.processing",
  "task.succeeded",
  "task.failed",
  "task.canceled",
  "ping",
  "endpoint.failing",
  "endpoint.recovered",
  "delivery.exhausted",
];

describe("/openapi.json webhooks", () => {
  it("has one entry per event type, the same the suite's receivers validate against", async () => {
    const { t } = suite.setup();
    const doc = (await (await t.request(null, "/openapi.json")).json()) as Record<string, any>;
    expect(Object.keys(doc.webhooks).sort()).toEqual([...TYPES].sort());
    expect(doc.webhooks).toEqual(webhookDocument().webhooks);
    for (const type of TYPES) {
      const op = doc.webhooks[type].post;
      expect(op.requestBody.content["application/json"].schema.$ref).toMatch(/^#\/components\/schemas\//);
    }
  });

  it("every sample the relay sends (each event type, image and video) validates against the served document with ajv", async () => {
    const { t } = suite.setup();
    const r = await suite.receiver();
    const { apiKey } = t.client();
    const doc = (await (await t.request(null, "/openapi.json")).json()) as Record<string, any>;
    const validators = webhookValidators(doc);
    const sent: string[] = [];
    for (const type of TEST_EVENT_TYPES) {
      for (const task_type of ["image", "video"]) {
        if (sent.length > 0 && sent.length % 9 === 0) t.clock.advance(61_000); // the per-client test limit
        const res = await t.request(apiKey, "/openapi/v1/webhooks/test", {
          method: "POST",
          json: { url: r.url("/hook"), type, task_type },
        });
        expect(res.status, await res.clone().text()).toBe(200);
        sent.push(type);
      }
    }
    expect(r.requests).toHaveLength(sent.length);
    for (const req of r.requests) {
      const body = JSON.parse(req.body) as { type: string };
      const validate = validators.get(body.type)!;
      expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
    }
  });

  it("the schemas are exact: a body without id, with an extra field, or of another status fails", () => {
    const validators = webhookValidators(webhookDocument());
    const ping = {
      id: "evt_01jf3y8k2m9q7r5t3v1w0x6z4a",
      type: "ping",
      timestamp: "2026-01-01T00:00:00.000Z",
      data: { client_id: "cli_1", message: "hi" },
    };
    const v = validators.get("ping")!;
    expect(v(ping)).toBe(true);
    const { id: _id, ...noId } = ping;
    expect(v(noId)).toBe(false);
    expect(v({ ...ping, extra: 1 })).toBe(false);
    expect(v({ ...ping, data: { ...ping.data, secret: "x" } })).toBe(false);
    expect(validators.get("task.succeeded")!({ ...ping, type: "task.succeeded" })).toBe(false);
  });
});

describe("/docs' create examples are runnable", () => {
  it.each(["image", "video"] as const)("the %s request example is accepted as it is (201)", async (kind) => {
    const { t } = suite.setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const { apiKey } = t.client();
    const doc = (await (await t.request(null, "/openapi.json")).json()) as Record<string, any>;
    const example =
      doc.components.schemas[kind === "image" ? "ImageGenerationRequest" : "VideoGenerationRequest"].example;
    expect(JSON.stringify(example)).not.toMatch(/additionalProp|"string"/);
    const res = await t.request(apiKey, `/openapi/v1/${kind}s/generations`, {
      method: "POST",
      json: example,
      idempotencyKey: `docs-${randomBytes(4).toString("hex")}`,
    });
    expect(res.status, await res.clone().text()).toBe(201);
  });
});

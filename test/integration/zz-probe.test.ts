import { it } from "vitest";
import { createTestRelay, imageBody } from "../helpers/relay.js";
it("probe", async () => {
  const t = createTestRelay();
  const k = t.client().apiKey;
  const show = async (label: string, p: Promise<Response>) => { const r = await p; console.log(label, r.status, await r.text()); };
  await show("nokey", t.request(k, "/openapi/v1/images/generations", { method: "POST", json: imageBody() }));
  await show("nul", t.request(k, "/openapi/v1/images/generations", { method: "POST", json: null, idempotencyKey: "abcdefghij" }));
  await show("meta", t.request(k, "/openapi/v1/images/generations", { method: "POST", json: imageBody({metadata: {a: 1}, callback_url: "http://x.example.com"}), idempotencyKey: "abcdefghij" }));
  await show("cb", t.request(k, "/openapi/v1/images/generations", { method: "POST", json: imageBody({callback_url: "https://10.0.0.1/"}), idempotencyKey: "abcdefghij" }));
  await show("big", t.request(k, "/openapi/v1/images/generations", { method: "POST", json: imageBody({x: "y".repeat(2e6)}), idempotencyKey: "abcdefghij" }));
  await show("limit", t.request(k, "/openapi/v1/tasks?limit=abc"));
  await show("limit0", t.request(k, "/openapi/v1/tasks?limit=0"));
  await show("cursor", t.request(k, "/openapi/v1/tasks?cursor=garbage"));
  await show("404", t.request(k, "/openapi/v1/nope"));
  await show("405", t.request(k, "/openapi/v1/tasks", {method: "DELETE"}));
  await show("models", t.request(k, "/openapi/v1/models"));
  await t.close();
});

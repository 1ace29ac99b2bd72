import { createPublicKey, randomBytes, verify } from "node:crypto";
import { describe, expect, it } from "vitest";
import { csrfOf, signedIn, type Visitor } from "../helpers/dashboard.js";
import { createTask } from "../helpers/flow.js";
import type { Received } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/** /dashboard/settings (docs/contract.md, "Webhook settings"): the same webhook defaults as /openapi/v1/webhooks/settings; header values never shown. */
const { setup, receiver } = upstreamSuite();
const KEY = randomBytes(32).toString("base64");
const TOKEN = "zap-token-9c41e0b7";
const SECOND = "make-secret-31f7aa";
const TASK_TOKEN = "task-own-token-77d2";

const apiSettings = async (t: TestRelay, apiKey: string) =>
  ((await (await t.request(apiKey, "/openapi/v1/webhooks/settings")).json()) as { data: any }).data;

/** Posts a form of the settings page and returns the status and the page it answers with. */
async function post(v: Visitor, action: string, fields: Record<string, string> = {}) {
  const res = await v.submit("/dashboard/settings", `/dashboard/settings${action}`, fields);
  return { status: res.status, page: await res.text() };
}

const headerRows = (page: string) =>
  [
    ...page.matchAll(
      /<td data-label="Header" class="mono">([^<]+)<\/td><td data-label="Value" class="muted">set \(hidden\)<\/td>/g,
    ),
  ].map((m) => m[1]);

function verifiedBy(publicKey: string, req: Received): boolean {
  const x = Buffer.from(publicKey.slice("whpk_".length), "base64").toString("base64url");
  const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x }, format: "jwk" });
  const content = Buffer.from(`${req.headers["webhook-id"]}.${req.headers["webhook-timestamp"]}.${req.body}`);
  return req.headers["webhook-signature"]!.split(" ").some(
    (part) => part.startsWith("v1a,") && verify(null, content, key, Buffer.from(part.slice(4), "base64")),
  );
}

describe("dashboard: webhook settings page", () => {
  it("adds, replaces, removes and clears default callback headers by name; the receiver gets the values, no page ever shows one", async () => {
    const { t, up } = setup({ RELAY_ENCRYPTION_KEY: KEY });
    const r = await receiver();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const seen: string[] = [];

    let res = await post(v, "/headers", { name: "X-Zap-Token", value: "first-value-0000" });
    expect(res.status).toBe(200);
    seen.push(res.page);
    res = await post(v, "/headers", { name: "X-Make-Key", value: SECOND });
    seen.push(res.page);
    // Same name in another case: replaced, not added.
    res = await post(v, "/headers", { name: "x-zap-token", value: TOKEN });
    seen.push(res.page);
    expect(res.page).toContain(
      '<div class="notice ok" role="status">Header x-zap-token saved. Its value is not shown again.</div>',
    );
    expect(headerRows(res.page)).toEqual(["x-make-key", "x-zap-token"]);
    expect((await apiSettings(t, apiKey)).callback_headers).toEqual(["x-make-key", "x-zap-token"]);

    // A refused header names the field, never echoes the value, and keeps the typed name.
    res = await post(v, "/headers", { name: "Content-Type", value: "refused-value-5e5e" });
    expect(res.status).toBe(422);
    expect(res.page).toContain("callback_headers.Content-Type: is set by the relay");
    expect(res.page).toContain('value="Content-Type"');
    expect(res.page).not.toContain("refused-value-5e5e");
    seen.push(res.page);

    // A test ping and a task's webhook carry the defaults (and the task's own header).
    seen.push(
      await (await v.submit("/dashboard/webhooks", "/dashboard/webhooks/test", { url: r.url("/ping") })).text(),
    );
    expect(r.requests[0]!.headers["x-zap-token"]).toBe(TOKEN);
    expect(r.requests[0]!.headers["x-make-key"]).toBe(SECOND);
    const id = await createTask(t, apiKey, {
      callback_url: r.url("/hook"),
      callback_headers: { "X-Task-Token": TASK_TOKEN },
    });
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    await t.relay.dispatcher.runOnce();
    const delivered = r.requests.find((q) => q.url === "/hook")!;
    expect(delivered.headers).toMatchObject({ "x-zap-token": TOKEN, "x-make-key": SECOND, "x-task-token": TASK_TOKEN });

    for (const path of [
      "/dashboard",
      `/dashboard/tasks/${id}`,
      "/dashboard/webhooks",
      "/dashboard/usage",
      "/dashboard/storage",
      "/dashboard/settings",
    ])
      seen.push(await v.page(path));
    for (const page of seen)
      for (const value of [TOKEN, SECOND, TASK_TOKEN, "first-value-0000"]) expect(page).not.toContain(value);

    res = await post(v, "/headers/remove", { name: "X-Make-Key" });
    expect(headerRows(res.page)).toEqual(["x-zap-token"]);
    res = await post(v, "/headers/clear");
    expect(res.page).toContain("No default callback headers are set.");
    expect((await apiSettings(t, apiKey)).callback_headers).toBeNull();
  });

  it("sets and removes the notification URL; a refused URL is shown with the API's status and kept in the field", async () => {
    const { t } = setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    let res = await post(v, "/notification", { notification_url: "https://ops.example.com/genrelay" });
    expect(res.status).toBe(200);
    expect(res.page).toContain('value="https://ops.example.com/genrelay"');
    expect((await apiSettings(t, apiKey)).notification_url).toBe("https://ops.example.com/genrelay");

    res = await post(v, "/notification", { notification_url: "http://127.0.0.1:9/ops" });
    expect(res.status).toBe(400);
    expect(res.page).toMatch(/<div class="notice error" role="alert">notification_url is not acceptable: [^<]+<\/div>/);
    expect(res.page).toContain('value="http://127.0.0.1:9/ops"');
    expect((await apiSettings(t, apiKey)).notification_url).toBe("https://ops.example.com/genrelay");

    res = await post(v, "/notification", { notification_url: "" });
    expect(res.page).toContain("Notification URL removed.");
    expect((await apiSettings(t, apiKey)).notification_url).toBeNull();
  });

  it("switches to Ed25519 and shows the public key the API shows; a ping verifies with it alone; back to HMAC hides it", async () => {
    const { t } = setup({ RELAY_ENCRYPTION_KEY: KEY });
    const r = await receiver();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    expect(await v.page("/dashboard/settings")).toContain('<input type="radio" name="signature" value="hmac" checked>');
    const res = await post(v, "/signature", { signature: "ed25519" });
    expect(res.status).toBe(200);
    const shown = /<output id="public-key" class="secret mono">(whpk_[^<]+)<\/output>/.exec(res.page)?.[1];
    expect(shown).toBe((await apiSettings(t, apiKey)).public_key);
    expect(res.page).toContain('<input type="radio" name="signature" value="ed25519" checked>');
    await v.submit("/dashboard/webhooks", "/dashboard/webhooks/test", { url: r.url("/ping") });
    expect(verifiedBy(shown!, r.requests[0]!)).toBe(true);

    const back = await post(v, "/signature", { signature: "hmac" });
    expect(back.page).not.toContain('id="public-key"');
    expect((await apiSettings(t, apiKey)).signature).toBe("hmac");
    expect((await post(v, "/signature", { signature: "rsa" })).status).toBe(422);
  });

  it("refuses a change without the page's CSRF token, and is linked from the navigation", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const page = await v.page("/dashboard/webhooks");
    expect(page).toContain('<a href="/dashboard/settings">Settings</a>');
    const res = await v.post("/dashboard/settings/headers", { csrf: `${csrfOf(page)}x`, name: "X-A", value: "b" });
    expect(res.status).toBe(403);
    expect((await apiSettings(t, apiKey)).callback_headers).toBeNull();
    const anonymous = await t.relay.app.request("http://relay.test/dashboard/settings");
    expect(anonymous.status).not.toBe(200);
  });
});

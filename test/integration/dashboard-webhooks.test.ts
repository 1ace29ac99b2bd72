import { describe, expect, it } from "vitest";
import { Webhook } from "standardwebhooks";
import { findClient } from "../../src/db/clients.js";
import { csrfOf, signedIn } from "../helpers/dashboard.js";
import { createTask } from "../helpers/flow.js";
import { status, verifyAt } from "../helpers/receiver.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

const { setup, receiver } = upstreamSuite();

describe("dashboard: webhooks page", () => {
  it("sends a signed test ping to a URL and shows the receiver's status, never its body", async () => {
    const { t } = setup();
    const r = await receiver();
    r.answers.push((_req, res) => {
      res.writeHead(202);
      res.end("pong <b>");
    });
    const { apiKey, secret } = t.client();
    const v = await signedIn(t, apiKey);
    const res = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/test", { url: r.url("/ping") });
    const page = await res.text();
    expect(res.status).toBe(200);
    expect(r.requests).toHaveLength(1);
    expect(verifyAt(secret, r.requests[0]!, t.clock.now())).toMatchObject({ type: "ping" });
    expect(page).toContain('<h3>Result: <span class="badge b-succeeded">succeeded</span></h3>');
    expect(page).toContain("<dt>Status code</dt><dd>202</dd>");
    expect(page).toContain(`<dt>webhook-id</dt><dd class="mono">${r.requests[0]!.headers["webhook-id"]}</dd>`);
    expect(page).not.toContain("pong");
    expect(page).toContain(`value="${r.url("/ping")}"`);
  });

  it("shows a refused URL with the API's status and message", async () => {
    const { t } = setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const res = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/test", { url: "http://127.0.0.1:9/x" });
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/<div class="notice error" role="alert">url is not acceptable: [^<]+<\/div>/);
  });

  it("rotates the secret and shows the new one once; the old one signs beside it", async () => {
    const { t } = setup();
    const { apiKey, secret, id } = t.client();
    const v = await signedIn(t, apiKey);
    const res = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/rotate");
    const page = await res.text();
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const shown = /<output id="new-secret" class="secret mono">(whsec_[^<]+)<\/output>/.exec(page)?.[1];
    const stored = findClient(t.database.db, id)!;
    expect(shown).toBe(stored.webhookSecret);
    expect(stored.previousWebhookSecret).toBe(secret);
    expect(page).toContain('<time datetime="2026-01-02T12:00:00.000Z">');
    expect(() => new Webhook(shown!)).not.toThrow();
    expect(await v.page("/dashboard/webhooks")).not.toContain(shown!);
  });

  it("recovers failed deliveries since a time (read as UTC) and says how many", async () => {
    const { t, up } = setup({ WEBHOOK_RETRY_SCHEDULE: "0s" });
    const r = await receiver(status(500));
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_url: r.url() });
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    expect(await v.page(`/dashboard/tasks/${id}`)).toContain('<span class="badge b-failed">failed</span> 1 attempt');

    const page = await v.page("/dashboard/webhooks");
    expect(page).toContain('<input id="since" name="since" type="datetime-local" required value="2025-12-31T12:00">');
    const later = await v.post("/dashboard/webhooks/recover", { csrf: csrfOf(page), since: "2026-01-01T12:01" });
    expect(await later.text()).toContain("0 failed deliveries queued again.");
    const res = await v.post("/dashboard/webhooks/recover", { csrf: csrfOf(page), since: "2026-01-01T11:59" });
    expect(await res.text()).toContain("1 failed delivery queued again.");
    r.fallback = (_q, s) => s.end("ok");
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(2);
    const bad = await v.post("/dashboard/webhooks/recover", { csrf: csrfOf(page), since: "yesterday" });
    expect(bad.status).toBe(400);
  });

  it("lists the client's callback hosts with their circuit breaker state", async () => {
    const { t, up } = setup({ WEBHOOK_RETRY_SCHEDULE: "0s,0s,0s,0s,0s,0s" });
    const r = await receiver(status(503));
    const { apiKey } = t.client();
    const other = t.client("other");
    await createTask(t, other.apiKey, { callback_url: "https://elsewhere.test/hook" });
    const v = await signedIn(t, apiKey);
    expect(await v.page("/dashboard/webhooks")).toContain("None yet: hosts appear once tasks carry a callback_url.");

    const id = await createTask(t, apiKey, { callback_url: r.url("/a") });
    await createTask(t, apiKey, { callback_url: r.url("/b") });
    await createTask(t, apiKey, { callback_url: "https://hooks.example.com/x" });
    const host = new URL(r.url()).host;
    let page = await v.page("/dashboard/webhooks");
    expect(page).not.toContain("elsewhere.test");
    const rows = [...page.matchAll(/<tr><td class="mono">([^<]+)<\/td><td><span class="badge b-([\w-]+)">[\w-]+<\/span><\/td><td>(\d+)<\/td><\/tr>/g)].map((m) => m.slice(1));
    expect(rows).toEqual([["hooks.example.com:443", "closed", "0"], [host, "closed", "0"]]);

    // Five failures in a row open the breaker for the receiver's host.
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    for (let i = 0; i < 5; i++) await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(5);
    page = await v.page("/dashboard/webhooks");
    expect(page).toContain(`<tr><td class="mono">${host}</td><td><span class="badge b-open">open</span></td>`);
  });
});

describe("dashboard: usage page", () => {
  it("shows charged, refunded and reserved against the credit limit, and tasks per hour as an SVG chart", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client("metered", { creditLimit: 1_000 });
    const done = await createTask(t, apiKey);
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(done)!.id, { status: "succeeded", output: {}, usage: { points_charged: 40, points_refunded: 10 } });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    t.clock.advance(3 * 3600_000);
    await createTask(t, apiKey);
    await createTask(t, apiKey, {}, { type: "video" });
    const v = await signedIn(t, apiKey);
    const page = await v.page("/dashboard/usage");
    expect(page).toContain('<div class="muted">Charged</div><div class="n">40</div>');
    expect(page).toContain('<div class="muted">Refunded</div><div class="n">10</div>');
    expect(page).toMatch(/<div class="muted">Reserved<\/div><div class="n">\d+<\/div>/);
    expect(page).toContain('<div class="muted">Credit limit</div><div class="n">1000</div>');
    expect(page).toMatch(/<label for="budget">Spent plus reserved: \d+ of 1000 points<\/label>\s*<meter id="budget" min="0" max="1000"/);
    // The chart: 24 hours, one succeeded bar at 12:00 and a two-task queued bar at 15:00.
    const svg = /<svg class="chart"[^]*?<\/svg>/.exec(page)![0];
    expect(svg).toContain('role="img"');
    expect(svg).toContain("<desc id=\"chart-desc\">3 tasks in total; the busiest hour had 2.</desc>");
    const rects = [...svg.matchAll(/<rect class="s-(\w+)"[^>]* height="([\d.]+)"><title>([^<]+)<\/title><\/rect>/g)].map((m) => [m[1], m[2], m[3]]);
    expect(rects).toEqual([
      ["succeeded", "83.0", "12:00 UTC: 1 succeeded"],
      ["queued", "166.0", "15:00 UTC: 2 queued"],
    ]);
    expect(svg.match(/<text [^>]*text-anchor="middle">\d\d:00<\/text>/g)).toHaveLength(8);
    expect(page).toMatch(/<tr><td>15:00<\/td><td>2<\/td><td>0<\/td><td>0<\/td><td>0<\/td><td>0<\/td><\/tr>/);
  });
});

describe("GET /docs", () => {
  it("renders Swagger UI from the relay's own files: no external host anywhere in the page", async () => {
    const { t } = setup();
    const res = await t.relay.app.request("/docs");
    const page = await res.text();
    expect(res.status).toBe(200);
    expect(page).not.toMatch(/https?:\/\//);
    const refs = [...page.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(refs).toEqual(["/docs/assets/swagger-ui.css", "/openapi.json", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/init.js"]);
    for (const ref of refs) expect((await t.relay.app.request(ref!)).status, ref).toBe(200);
    expect(await (await t.relay.app.request("/docs/assets/init.js")).text()).toContain('url: "/openapi.json"');
    expect((await t.relay.app.request("/docs/assets/package.json")).status).toBe(404);
  });
});

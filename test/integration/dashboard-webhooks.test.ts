import { describe, expect, it } from "vitest";
import { Webhook } from "standardwebhooks";
import { find as findClient } from "../../src/db/sqlite/clients.js";
import { csrfOf, signedIn } from "../helpers/dashboard.js";
import { createTask, readTask } from "../helpers/flow.js";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import type { TestRelay } from "../helpers/relay.js";
import { TRIGGERS_PER_MINUTE } from "../../src/services/deliveries.js";
import { status, verifyAt } from "../helpers/receiver.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

const { setup, receiver } = upstreamSuite();

/** The callback-hosts table's rows, in page order. */
const hostRows = (page: string) =>
  [
    ...page.matchAll(
      /<tr><td data-label="Host" class="mono">([^<]+)<\/td><td data-label="State"><span class="badge b-(\w+)">[\s\S]*?<td data-label="Failed attempts">([^<]*)<\/td>\s*<td data-label="Last error">([^<]*)<\/td>\s*<td data-label="Pending events">(\d+)<\/td>\s*<td data-label="Circuit breaker"><span class="badge b-([\w-]+)">[\s\S]*?<td data-label="Action">([\s\S]*?)<\/td><\/tr>/g,
    ),
  ].map((m) => ({
    host: m[1],
    state: m[2],
    failed: m[3],
    error: m[4],
    pending: Number(m[5]),
    breaker: m[6],
    retry: m[7]!.includes(">Retry now</button>"),
  }));

async function succeed(t: TestRelay, up: FakeUpstream, apiKey: string, id: string) {
  await t.relay.submitter.runOnce();
  up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
  t.clock.advance(3_000);
  await t.relay.poller.runOnce();
  expect((await readTask(t, apiKey, id)).data.status).toBe("succeeded");
}

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
    expect(hostRows(page).map((h) => [h.host, h.breaker, h.state])).toEqual([
      ["hooks.example.com:443", "closed", "ok"],
      [host, "closed", "ok"],
    ]);

    // Five failures in a row open the breaker for the receiver's host.
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    for (let i = 0; i < 5; i++) await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(5);
    page = await v.page("/dashboard/webhooks");
    expect(hostRows(page).find((h) => h.host === host)).toMatchObject({
      breaker: "open",
      state: "failing",
      failed: "5",
    });
  });

  it("every signed-in page carries a banner of the client's callback hosts answering no 2xx, until the host answers 2xx again (#21)", async () => {
    const { t, up } = setup();
    const r = await receiver(status(503));
    const mine = t.client("mine");
    const other = t.client("other");
    const id = await createTask(t, mine.apiKey, { callback_url: r.url() });
    const v = await signedIn(t, mine.apiKey);
    const pages = ["/dashboard", `/dashboard/tasks/${id}`, "/dashboard/webhooks", "/dashboard/usage"];
    for (const path of pages) expect(await v.page(path), path).not.toContain("failing-banner");
    await succeed(t, up, mine.apiKey, id);
    const failedAt = t.clock.now();
    await t.relay.dispatcher.runOnce();
    t.clock.advance(2_000);
    const host = new URL(r.url()).host;
    for (const path of pages) {
      const page = await v.page(path);
      expect(page, path).toContain(
        '<section class="notice error failing-banner" aria-labelledby="failing-title">\n<h2 id="failing-title">A callback host is failing</h2>',
      );
      expect(page, path).toContain(
        `<li><span class="mono">${host}</span> has answered no 2xx since <time datetime="${new Date(failedAt).toISOString()}">`,
      );
      expect(page, path).toContain('(2.0 s, 1 failed attempt): <span class="muted">HTTP 503</span></li>');
      expect(page, path).toContain('<a href="/dashboard/webhooks#h-hosts">See callback hosts and retry now</a>');
    }
    // Another client, same relay: not its host, no banner.
    expect(await (await signedIn(t, other.apiKey)).page("/dashboard")).not.toContain("failing-banner");
    // The host's first 2xx ends the failing run, and the banner goes.
    r.fallback = (_q, res) => res.end("ok");
    t.clock.advance(10_000);
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(2);
    for (const path of pages) expect(await v.page(path), path).not.toContain("failing-banner");
  });

  it("the callback-hosts table shows since when, failed attempts, last error and pending events; Retry now sends the waiting webhooks; Recover says what is still retrying (#21)", async () => {
    const { t, up } = setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1h" });
    const r = await receiver(status(503));
    const { apiKey } = t.client();
    const first = await createTask(t, apiKey, { callback_url: r.url("/a") });
    const second = await createTask(t, apiKey, { callback_url: r.url("/b") });
    await createTask(t, apiKey, { callback_url: "https://hooks.example.com/x" });
    await succeed(t, up, apiKey, first);
    await succeed(t, up, apiKey, second);
    const failingSince = t.clock.now();
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(2);
    t.clock.advance(60_000);
    const v = await signedIn(t, apiKey);
    const host = new URL(r.url()).host;
    let page = await v.page("/dashboard/webhooks");
    expect(hostRows(page)).toEqual([
      { host, state: "failing", failed: "2", error: "HTTP 503", pending: 2, breaker: "closed", retry: true },
      {
        host: "hooks.example.com:443",
        state: "ok",
        failed: "—",
        error: "—",
        pending: 0,
        breaker: "closed",
        retry: false,
      },
    ]);
    expect(page).toContain(
      `<span class="badge b-failing">failing</span> <span class="muted">since <time datetime="${new Date(failingSince).toISOString()}">`,
    );
    expect(page).toContain(
      `<input type="hidden" name="host" value="${host}"><button class="btn secondary" type="submit" aria-label="Retry now: ${host}">Retry now</button>`,
    );

    // Recover re-queues failed deliveries only: it finds none, and says the two are retrying.
    expect(page).toContain("<strong>2 deliveries are retrying</strong> after a failed attempt.");
    const recovered = await (
      await v.post("/dashboard/webhooks/recover", { csrf: csrfOf(page), since: "2026-01-01T11:00" })
    ).text();
    expect(recovered).toContain("0 failed deliveries queued again.");
    expect(recovered).toContain("<strong>2 deliveries are retrying</strong>");

    // Retry now: both waiting webhooks go at once instead of in an hour.
    r.fallback = (_q, res) => res.end("ok");
    expect((await v.post("/dashboard/webhooks/hosts/retry", { host })).status).toBe(403);
    const retried = await v.post("/dashboard/webhooks/hosts/retry", { csrf: csrfOf(page), host });
    expect(retried.status).toBe(200);
    expect(await retried.text()).toContain(
      `<div class="notice ok" role="status">2 webhooks to ${host} sent now, as a trial.</div>`,
    );
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(4);
    page = await v.page("/dashboard/webhooks");
    expect(hostRows(page)[1]).toEqual({
      host,
      state: "ok",
      failed: "—",
      error: "—",
      pending: 0,
      breaker: "closed",
      retry: false,
    });
    expect(page).toContain("No delivery is retrying now.");
    expect(page).not.toContain("failing-banner");

    // The service's refusals, shown as the other actions show them: a bad host, then the per-client limit.
    const bad = await v.post("/dashboard/webhooks/hosts/retry", { csrf: csrfOf(page), host: "not a host" });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('<div class="notice error" role="alert">host must be hostname:port');
    let last: Response | undefined;
    for (let i = 1; i <= TRIGGERS_PER_MINUTE; i++)
      last = await v.post("/dashboard/webhooks/hosts/retry", { csrf: csrfOf(page), host });
    expect(last!.status).toBe(429);
    expect(await last!.text()).toMatch(
      new RegExp(
        `<div class="notice error" role="alert">At most ${TRIGGERS_PER_MINUTE} retry-nows a minute. Retry in \\d+ s.</div>`,
      ),
    );
  });
});

describe("dashboard: usage page", () => {
  it("shows charged, refunded and reserved against the credit limit, and tasks per hour as an SVG chart", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client("metered", { creditLimit: 1_000 });
    const done = await createTask(t, apiKey);
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(done)!.id, {
      status: "succeeded",
      output: {},
      usage: { points_charged: 40, points_refunded: 10 },
    });
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
    expect(page).toMatch(
      /<label for="budget">Spent plus reserved: \d+ of 1000 points<\/label>\s*<meter id="budget" min="0" max="1000"/,
    );
    // The chart: 24 hours, one succeeded bar at 12:00 and a two-task queued bar at 15:00.
    const svg = /<svg class="chart"[\s\S]*?<\/svg>/.exec(page)![0];
    expect(svg).toContain('role="img"');
    expect(svg).toContain('<desc id="chart-desc">3 tasks in total; the busiest hour had 2.</desc>');
    const rects = [
      ...svg.matchAll(/<rect class="s-(\w+)"[^>]* height="([\d.]+)"><title>([^<]+)<\/title><\/rect>/g),
    ].map((m) => [m[1], m[2], m[3]]);
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
    expect(refs).toEqual([
      "/docs/assets/swagger-ui.css",
      "/openapi.json",
      "/docs/assets/swagger-ui-bundle.js",
      "/docs/assets/init.js",
    ]);
    for (const ref of refs) expect((await t.relay.app.request(ref!)).status, ref).toBe(200);
    expect(await (await t.relay.app.request("/docs/assets/init.js")).text()).toContain('url: "/openapi.json"');
    expect((await t.relay.app.request("/docs/assets/package.json")).status).toBe(404);
  });
});

import { existsSync } from "node:fs";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLiveRelay, type LiveRelay } from "../helpers/live-relay.js";
import { ok, startReceiver, status, verifyAt, type Receiver } from "../helpers/receiver.js";

/**
 * The dashboard in a real browser (Debian's chromium-headless-shell through puppeteer-core): a new
 * user signs in, finds a sandbox task, follows it to a delivered webhook, redelivers it and sees
 * the second attempt, while the page never asks any host but the relay for anything.
 */
const BROWSER = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium-headless-shell";
const haveBrowser = existsSync(BROWSER);
if (!haveBrowser) {
  const hint = `no browser at ${BROWSER}: apt-get install -y --no-install-recommends chromium-headless-shell (or set CHROMIUM_PATH)`;
  // .ci/run sets this: in CI a missing browser is a failure, never a silent skip.
  if (process.env.GENRELAY_REQUIRE_BROWSER === "1") throw new Error(`browser tests required but ${hint}`);
  console.warn(`dashboard browser tests SKIPPED: ${hint}`);
}

describe.skipIf(!haveBrowser)("dashboard in a real browser", () => {
  let live: LiveRelay;
  let receiver: Receiver;
  let browser: Browser;

  beforeAll(async () => {
    // A failed webhook's next scheduled try is an hour away: what goes out sooner was asked for (Retry now).
    live = await startLiveRelay({ WEBHOOK_RETRY_SCHEDULE: "0s,1h" });
    receiver = await startReceiver();
    browser = await puppeteer.launch({
      executablePath: BROWSER,
      headless: "shell",
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await receiver?.close();
    await live?.close();
  });

  /** Every URL the page asks for (documents, assets, fetches), to check the hosts at the end. */
  async function newPage(): Promise<{ page: Page; requested: string[] }> {
    // A context of its own: no cookie from another test's sign-in.
    const page = await (await browser.createBrowserContext()).newPage();
    await page.setViewport({ width: 1100, height: 900 });
    const requested: string[] = [];
    page.on("request", (req) => requested.push(req.url()));
    return { page, requested };
  }

  // Page-side conditions as source text: this program is compiled without the DOM library.
  const settled = `document.documentElement.dataset.settled === "true" || !document.querySelector('meta[name="genrelay-refresh"]')`;
  const attemptsShown = (n: number) =>
    `[...document.querySelectorAll("main tbody tr")].filter((r) => r.textContent.includes("attempt: task.succeeded")).length === ${n}`;
  const attemptRows = (page: Page) =>
    page.$$eval("main tbody tr", (rows) =>
      rows.map((r) => r.textContent ?? "").filter((text) => text.includes("attempt: task.succeeded")),
    );

  it("signs in, finds a task, follows it to a delivered webhook, redelivers it and sees the second attempt; no other host is contacted", async () => {
    const { apiKey, secret } = live.client("Browser Co");
    const created = await fetch(`${live.url}/openapi/v1/images/generations`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${apiKey}`,
        "Content-Type": "application/json",
        "Idempotency-Key": "browser-test-1",
      },
      body: JSON.stringify({
        model: "p-image",
        mode: "generate",
        prompt: "a lighthouse at dawn",
        count: 1,
        callback_url: receiver.url("/hook"),
        metadata: { order: "B-42" },
      }),
    });
    expect(created.status).toBe(201);
    const taskId = ((await created.json()) as { data: { id: string } }).data.id;
    const firstDelivery = receiver.next();

    const { page, requested } = await newPage();
    await page.goto(`${live.url}/dashboard`);
    await page.type("#api_key", apiKey);
    await Promise.all([page.waitForNavigation(), page.click("form[action='/dashboard/sign-in'] button[type=submit]")]);
    expect(await page.$eval("h1", (h) => h.textContent)).toBe("Tasks");
    expect(page.url()).toBe(`${live.url}/dashboard`);

    // Find it by its metadata value, then open it.
    await page.type("#q", "B-42");
    await Promise.all([page.waitForNavigation(), page.click("form[role=search] button[type=submit]")]);
    expect(page.url()).toBe(`${live.url}/dashboard?q=B-42&status=&type=&delivery=`);
    await Promise.all([page.waitForNavigation(), page.click(`a[href='/dashboard/tasks/${taskId}']`)]);
    expect(await page.$eval("h1", (h) => h.textContent)).toBe(taskId);

    // The page refreshes itself (app.js) until the task has succeeded and its webhook is delivered.
    const delivered = await firstDelivery;
    expect(verifyAt(secret, delivered, Number(delivered.headers["webhook-timestamp"]) * 1000)).toMatchObject({
      type: "task.succeeded",
    });
    await page.waitForFunction(settled, { timeout: 15_000 });
    await page.waitForFunction(attemptsShown(1), { timeout: 15_000 });
    const first = await attemptRows(page);
    expect(first).toHaveLength(1);
    expect(first[0]).toContain("200");
    expect(first[0]).toContain(delivered.headers["webhook-id"]);

    // Redeliver: the page comes back pending and refreshes until the second attempt is in.
    const secondDelivery = receiver.next();
    await Promise.all([
      page.waitForNavigation(),
      page.click(`form[action='/dashboard/tasks/${taskId}/redeliver'] button`),
    ]);
    expect(page.url()).toBe(`${live.url}/dashboard/tasks/${taskId}?done=redelivered`);
    expect(await page.$eval(".notice.ok[role=status]", (n) => n.textContent)).toContain("queued for delivery again");
    const again = await secondDelivery;
    expect(again.headers["webhook-id"]).toBe(delivered.headers["webhook-id"]);
    await page.waitForFunction(attemptsShown(2), { timeout: 15_000 });
    const both = await attemptRows(page);
    expect(both.every((row) => row.includes("200") && row.includes(delivered.headers["webhook-id"]!))).toBe(true);

    const relayHost = new URL(live.url).host;
    expect(requested.length).toBeGreaterThan(5);
    expect(requested.filter((u) => new URL(u).host !== relayHost)).toEqual([]);
    await page.browserContext().close();
  });

  /** Signs a new browser page in as the client with this key; returns it on the tasks page. */
  async function signIn(apiKey: string) {
    const opened = await newPage();
    await opened.page.goto(`${live.url}/dashboard`);
    await opened.page.type("#api_key", apiKey);
    await Promise.all([
      opened.page.waitForNavigation(),
      opened.page.click("form[action='/dashboard/sign-in'] button[type=submit]"),
    ]);
    return opened;
  }

  async function createImage(apiKey: string, key: string, callbackUrl?: string): Promise<string> {
    const res = await fetch(`${live.url}/openapi/v1/images/generations`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({
        model: "p-image",
        mode: "generate",
        prompt: "a lighthouse at dawn",
        count: 1,
        ...(callbackUrl ? { callback_url: callbackUrl } : {}),
      }),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  }

  it("a failing callback host shows a banner on every page; Retry now on the webhooks page sends its waiting webhook, and the banner goes (#21)", async () => {
    const failing = await startReceiver(status(503));
    try {
      const { id: clientId, apiKey } = live.client("Flaky Receiver Co");
      const host = new URL(failing.url()).host;
      const firstTry = failing.next();
      await createImage(apiKey, "browser-failing-1", failing.url("/hook"));
      await firstTry;
      const { store } = live.relay.deps;
      await expect
        .poll(async () => (await store.keyHealth.failingOf(clientId)).map((f) => f.host), { timeout: 10_000 })
        .toEqual([host]);

      const { page, requested } = await signIn(apiKey);
      for (const path of ["/dashboard", "/dashboard/usage"]) {
        await page.goto(`${live.url}${path}`);
        const banner = await page.$eval(".failing-banner", (n) => n.textContent ?? "");
        expect(banner).toContain("A callback host is failing");
        expect(banner).toContain(`${host} has answered no 2xx since`);
        expect(banner).toContain("1 failed attempt): HTTP 503");
      }
      // The banner's link leads to the callback-hosts table, where the host waits with its one webhook.
      await Promise.all([
        page.waitForNavigation(),
        page.click(".failing-banner a[href='/dashboard/webhooks#h-hosts']"),
      ]);
      const row = await page.$eval("#callback-hosts tbody tr", (tr) =>
        [...tr.querySelectorAll("td")].map((td) => td.textContent?.trim() ?? ""),
      );
      expect(row[0]).toBe(host);
      expect(row[1]).toMatch(/^failing since /);
      expect(row.slice(2, 5)).toEqual(["1", "HTTP 503", "1"]);

      // The receiver is fixed; Retry now sends the webhook at once instead of in an hour.
      failing.fallback = ok;
      const retried = failing.next();
      await Promise.all([
        page.waitForNavigation(),
        page.click(`#callback-hosts button[aria-label='Retry now: ${host}']`),
      ]);
      expect(await page.$eval(".notice.ok[role=status]", (n) => n.textContent)).toBe(
        `1 webhook to ${host} sent now, as a trial.`,
      );
      expect((await retried).json.type).toBe("task.succeeded");
      await expect.poll(async () => (await store.keyHealth.failingOf(clientId)).length, { timeout: 10_000 }).toBe(0);
      await page.goto(`${live.url}/dashboard`);
      expect(await page.$(".failing-banner")).toBeNull();
      const relayHost = new URL(live.url).host;
      // data: URLs are the browser's own (the date input's calendar icon).
      expect(requested.filter((u) => !u.startsWith("data:") && new URL(u).host !== relayHost)).toEqual([]);
      await page.browserContext().close();
    } finally {
      await failing.close();
    }
  });

  it("Cancel is offered only on a task not yet submitted upstream, and asks for confirmation before it cancels (#21)", async () => {
    const { apiKey } = live.client("Cancel Co");
    // Submitted at once (the submitter runs): no Cancel.
    const submitted = await createImage(apiKey, "browser-cancel-1");
    await expect
      .poll(async () => (await live.relay.deps.store.tasks.find(submitted))?.submitAttempts, { timeout: 10_000 })
      .toBeGreaterThan(0);
    // With the submitter stopped, the next task waits in the relay, never offered upstream.
    await live.relay.loops.find((l) => l.name === "submitter")!.stop();
    const waiting = await createImage(apiKey, "browser-cancel-2");
    const { page } = await signIn(apiKey);
    await page.goto(`${live.url}/dashboard/tasks/${submitted}`);
    expect(await page.$(`a[href='/dashboard/tasks/${submitted}/cancel']`)).toBeNull();

    await page.goto(`${live.url}/dashboard/tasks/${waiting}`);
    await Promise.all([page.waitForNavigation(), page.click(`a[href='/dashboard/tasks/${waiting}/cancel']`)]);
    expect(await page.$eval("h1", (h) => h.textContent)).toBe("Cancel this task?");
    // "No, keep it" goes back and changes nothing.
    await Promise.all([page.waitForNavigation(), page.click("form.actions a.secondary")]);
    expect(page.url()).toBe(`${live.url}/dashboard/tasks/${waiting}`);
    expect((await live.relay.deps.store.tasks.find(waiting))?.status).toBe("queued");
    // Cancel, then confirm.
    await Promise.all([page.waitForNavigation(), page.click(`a[href='/dashboard/tasks/${waiting}/cancel']`)]);
    await Promise.all([page.waitForNavigation(), page.click("form.actions button[type=submit]")]);
    expect(page.url()).toBe(`${live.url}/dashboard/tasks/${waiting}?done=canceled`);
    expect(await page.$eval(".notice.ok[role=status]", (n) => n.textContent)).toContain("The task is canceled.");
    expect((await live.relay.deps.store.tasks.find(waiting))?.status).toBe("canceled");
    expect(await page.$(`a[href='/dashboard/tasks/${waiting}/cancel']`)).toBeNull();
    await page.browserContext().close();
  });

  it("a running task's page follows its event stream with EventSource and shows a cancel from elsewhere (#45)", async () => {
    const { apiKey } = live.client("Stream Co");
    // With the submitter stopped the task waits in the relay until it is canceled.
    await live.relay.loops.find((l) => l.name === "submitter")!.stop();
    const id = await createImage(apiKey, "browser-stream-1");
    const { page } = await signIn(apiKey);
    const sources: string[] = [];
    page.on("request", (req) => {
      if (req.resourceType() === "eventsource") sources.push(req.url());
    });
    await page.goto(`${live.url}/dashboard/tasks/${id}`);
    await expect.poll(() => live.relay.streams.watchers({ task: id }), { timeout: 10_000 }).toBe(1);
    // The relay can count the watcher before the browser's request event reaches this process.
    await expect
      .poll(() => sources, { timeout: 10_000 })
      .toEqual([expect.stringMatching(new RegExp(`^${live.url}/openapi/v1/tasks/${id}/events\\?token=gst_`))]);
    const canceled = await fetch(`${live.url}/openapi/v1/tasks/${id}/cancel`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}` },
    });
    expect(canceled.status).toBe(200);
    await page.waitForFunction(`document.querySelector("main .badge.b-canceled") !== null`, { timeout: 10_000 });
    await expect.poll(() => live.relay.streams.watchers({ task: id }), { timeout: 10_000 }).toBe(0);
    await page.browserContext().close();
  });

  it("Settings: a default callback header and Ed25519 signing set through the forms; the page shows the header's name and the public key, never the value (#23)", async () => {
    const { apiKey } = live.client("Settings Co");
    const { page } = await signIn(apiKey);
    await Promise.all([page.waitForNavigation(), page.click("nav a[href='/dashboard/settings']")]);
    expect(await page.$eval("h1", (h) => h.textContent)).toBe("Webhook settings");
    await page.type("#header_name", "X-Zap-Token");
    await page.type("#header_value", "browser-token-4411");
    await Promise.all([
      page.waitForNavigation(),
      page.click("form[action='/dashboard/settings/headers'] button[type=submit]"),
    ]);
    expect(await page.$$eval("#callback-headers tbody td.mono", (tds) => tds.map((td) => td.textContent))).toEqual([
      "x-zap-token",
    ]);
    await page.click("input[name=signature][value=ed25519]");
    await Promise.all([
      page.waitForNavigation(),
      page.click("form[action='/dashboard/settings/signature'] button[type=submit]"),
    ]);
    const shown = await page.$eval("#public-key", (n) => n.textContent);
    const api = (await (
      await fetch(`${live.url}/openapi/v1/webhooks/settings`, { headers: { Authorization: `Bearer ${apiKey}` } })
    ).json()) as { data: { public_key: string; callback_headers: string[] } };
    expect(api.data).toMatchObject({ public_key: shown, callback_headers: ["x-zap-token"] });
    expect(await page.content()).not.toContain("browser-token-4411");
    await page.browserContext().close();
  });

  it("Webhooks: an endpoint added through the form receives the client's signed webhook; Remove takes it away (#33)", async () => {
    const { apiKey, secret } = live.client("Endpoints Co");
    const hook = await startReceiver();
    const { page } = await signIn(apiKey);
    await Promise.all([page.waitForNavigation(), page.click("nav a[href='/dashboard/webhooks']")]);
    expect(await page.$("#no-endpoints")).not.toBeNull();
    await page.type("#endpoint-url", hook.url("/endpoint"));
    await page.type("#endpoint-description", "browser endpoint");
    await page.click("input[name=events][value='task.failed']");
    await Promise.all([
      page.waitForNavigation(),
      page.click("form[action='/dashboard/webhooks/endpoints'] button[type=submit]"),
    ]);
    expect(
      await page.$$eval("#endpoints tbody td[data-label=Events]", (tds) => tds.map((td) => td.textContent)),
    ).toEqual(["task.succeeded, task.canceled"]);
    // A task canceled before it reaches the upstream: its task.canceled goes to the endpoint.
    await live.relay.loops.find((l) => l.name === "submitter")!.stop();
    const id = await createImage(apiKey, "browser-endpoint-1");
    const canceled = await fetch(`${live.url}/openapi/v1/tasks/${id}/cancel`, {
      method: "POST",
      headers: { Authorization: `Bearer ${apiKey}` },
    });
    expect(canceled.status).toBe(200);
    const arrived = () => hook.requests.find((r) => r.json.data?.id === id);
    while (!arrived()) await hook.next();
    expect(verifyAt(secret, arrived()!, Date.now())).toMatchObject({ type: "task.canceled", data: { id } });
    await Promise.all([
      page.waitForNavigation(),
      page.click("form[action='/dashboard/webhooks/endpoints/delete'] button[type=submit]"),
    ]);
    expect(await page.$("#no-endpoints")).not.toBeNull();
    const listed = (await (
      await fetch(`${live.url}/openapi/v1/webhooks/endpoints`, { headers: { Authorization: `Bearer ${apiKey}` } })
    ).json()) as { data: unknown[] };
    expect(listed.data).toEqual([]);
    await page.browserContext().close();
    await hook.close();
  });

  it("renders /docs with the relay's own Swagger UI files and no other host", async () => {
    const { page, requested } = await newPage();
    await page.goto(`${live.url}/docs`);
    await page.waitForSelector(".swagger-ui .info .title", { timeout: 15_000 });
    expect(await page.$eval(".swagger-ui .info .title", (n) => n.textContent)).toContain("genrelay");
    const relayHost = new URL(live.url).host;
    expect(requested.filter((u) => !u.startsWith("data:") && new URL(u).host !== relayHost)).toEqual([]);
    await page.browserContext().close();
  });
});

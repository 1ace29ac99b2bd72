import { describe, expect, it, vi } from "vitest";
import { outputTextOf } from "../../src/core/stored-output.js";
import type { FakeUpstream } from "../helpers/fake-upstream.js";
import { csrfOf, signedIn } from "../helpers/dashboard.js";
import { createTask, readTask } from "../helpers/flow.js";
import { freePort } from "../helpers/ports.js";
import { status } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

const { setup, receiver } = upstreamSuite();

/** Ids of the task links in a tasks page, in page order. */
const rowIds = (page: string) =>
  [...page.matchAll(/<a class="mono" href="\/dashboard\/tasks\/(task_\w+)">/g)].map((m) => m[1]);

async function succeed(t: TestRelay, up: FakeUpstream, apiKey: string, id: string, output: unknown) {
  await t.relay.submitter.runOnce();
  up.set(up.taskOf(id)!.id, { status: "succeeded", output, usage: { points_charged: 20, points_refunded: 5 } });
  t.clock.advance(3_000);
  await t.relay.poller.runOnce();
  expect((await readTask(t, apiKey, id)).data.status).toBe("succeeded");
}

describe("dashboard: tasks page", () => {
  it("lists the client's tasks newest first with type, model, status, delivery, created and duration; never another client's", async () => {
    const { t } = setup();
    const a = t.client("a");
    const b = t.client("b");
    const first = await createTask(t, a.apiKey, {}, { type: "video" });
    t.clock.advance(1_000);
    const second = await createTask(t, a.apiKey);
    const theirs = await createTask(t, b.apiKey);
    const v = await signedIn(t, a.apiKey);
    t.clock.advance(4_000);
    const page = await v.page("/dashboard");
    expect(rowIds(page)).toEqual([second, first]);
    expect(page).not.toContain(theirs);
    const row = page.slice(page.indexOf(`/dashboard/tasks/${first}`));
    expect(row).toMatch(
      /^[\s\S]*?<td data-label="Type">video<\/td><td data-label="Model">v-video<\/td><td data-label="Status"><span class="badge b-queued">queued<\/span><\/td>\s*<td data-label="Delivery"><span class="badge b-none">none<\/span><\/td>\s*<td data-label="Created"><time datetime="2026-01-01T12:00:00.000Z">2026-01-01 12:00:00 UTC<\/time><\/td><td data-label="Duration">5.0 s so far<\/td><\/tr>/,
    );
    // Another client's task is a 404 under this session, exactly like an unknown id.
    for (const id of [theirs, "task_00000000000000000000000000"]) {
      const res = await v.get(`/dashboard/tasks/${id}`);
      expect(res.status).toBe(404);
      expect(await res.text()).toContain("No task with this id belongs to your API key.");
    }
    const redeliver = await v.post(`/dashboard/tasks/${theirs}/redeliver`, { csrf: csrfOf(page) });
    expect(redeliver.status).toBe(404);
  });

  it("filters by status and type, and searches by relay id, upstream id and metadata value", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const image = await createTask(t, apiKey, { metadata: { order: "A-17", team: "blue" } });
    const video = await createTask(t, apiKey, { metadata: { order: "B-2" } }, { type: "video" });
    await t.relay.submitter.runOnce();
    const upstreamId = up.taskOf(video)!.id;
    const v = await signedIn(t, apiKey);
    expect(rowIds(await v.page("/dashboard?type=video"))).toEqual([video]);
    expect(rowIds(await v.page("/dashboard?type=image"))).toEqual([image]);
    expect(rowIds(await v.page("/dashboard?status=queued"))).toEqual([video, image]);
    expect(rowIds(await v.page("/dashboard?status=succeeded"))).toEqual([]);
    expect(rowIds(await v.page(`/dashboard?q=${image}`))).toEqual([image]);
    expect(rowIds(await v.page(`/dashboard?q=${upstreamId}`))).toEqual([video]);
    expect(rowIds(await v.page("/dashboard?q=A-17"))).toEqual([image]);
    expect(rowIds(await v.page("/dashboard?q=blue&type=video"))).toEqual([]);
    expect(await v.page("/dashboard?q=nothing-like-this")).toContain("No task matches.");
    // Filters are kept in the form, and unknown values are ignored rather than failing.
    expect(await v.page("/dashboard?status=succeeded")).toContain('<option value="succeeded" selected>');
    expect(rowIds(await v.page("/dashboard?status=bogus&type=<x>"))).toEqual([video, image]);
  });

  it("pages with a cursor of 25 rows, keeping the filters", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const ids: string[] = [];
    for (let i = 0; i < 27; i++) ids.push(await createTask(t, apiKey));
    const v = await signedIn(t, apiKey);
    const first = await v.page("/dashboard?type=image");
    expect(rowIds(first)).toEqual(ids.slice(2).reverse());
    const older = /<a href="([^"]+)">Older tasks →<\/a>/.exec(first)![1]!.replaceAll("&amp;", "&");
    expect(older).toBe(`/dashboard?type=image&before=${ids[2]}`);
    const second = await v.page(older);
    expect(rowIds(second)).toEqual([ids[1], ids[0]]);
    expect(second).not.toContain("Older tasks");
  });
});

describe("dashboard: task page", () => {
  it("shows the request, metadata, output with previews allowed by the CSP, usage, and one timeline of events and attempts", async () => {
    const { t, up } = setup();
    const r = await receiver();
    r.answers.push(status(500));
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_url: r.url("/hook"), metadata: { order: "A-17" } });
    const output = {
      images: [{ url: "https://files.upstream.test/out/1.png" }],
      video: { url: "https://media.upstream.test/v" },
      note: "http://plain.test/x.png",
    };
    await succeed(t, up, apiKey, id, output);
    await t.relay.dispatcher.runOnce();
    t.clock.advance(10_000);
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    const res = await v.get(`/dashboard/tasks/${id}`);
    const page = await res.text();
    expect(res.headers.get("content-security-policy")).toContain(
      "img-src 'self' https://files.upstream.test https://media.upstream.test; media-src 'self' https://files.upstream.test https://media.upstream.test;",
    );
    expect(page).toContain("<p><strong>Prompt:</strong> a red fox in snow</p>");
    expect(page).toContain("&quot;order&quot;: &quot;A-17&quot;");
    expect(page).toContain('<img src="https://files.upstream.test/out/1.png" alt="Image output of');
    expect(page).toContain('<video src="https://media.upstream.test/v" controls');
    // http URLs are not previewed (the CSP would not allow them) but are offered as links.
    expect(page).not.toContain('src="http://plain.test');
    expect(page).toContain('<a href="http://plain.test/x.png" rel="noreferrer">');
    expect(page).toMatch(/<dt>Charged<\/dt><dd>20<\/dd><dt>Refunded<\/dt><dd>5<\/dd>/);
    const eventId =
      /event <strong>task.succeeded<\/strong> <span class="muted destination">to callback<\/span><\/td><td><span class="badge b-succeeded">succeeded<\/span><\/td><td><\/td><td><\/td><td class="mono">(evt_\w+)<\/td>/.exec(
        page,
      )?.[1];
    expect(eventId).toBeDefined();
    const attempts = [
      ...page.matchAll(
        /<td>attempt: task.succeeded[\s\S]*?<td><span class="badge b-(\w+)">\w+<\/span> (\d+)<\/td><td>(\d+) ms<\/td><td class="hide-sm">([^<]+)<\/td><td class="mono">(evt_\w+)<\/td>/g,
      ),
    ];
    expect(attempts.map((m) => [m[1], m[2], m[4], m[5]])).toEqual([
      ["failed", "500", r.url("/hook"), eventId],
      ["succeeded", "200", r.url("/hook"), eventId],
    ]);
    expect(page).toContain("HTTP 500");
    // Settled: nothing to refresh.
    expect(page).not.toContain("genrelay-refresh");
  });

  it("a large output is shown as text, never parsed: its start, where to read it whole, previews and links from its URLs", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const images = Array.from({ length: 6_000 }, (_, i) => ({
      url: `https://files.upstream.test/out/${i}.png`,
      seed: i,
    }));
    const output = { note: "http://plain.test/x.png", images };
    await succeed(t, up, apiKey, id, output);
    // Kept in pieces out of the row (core/stored-output.ts): the page reads them.
    const stored = (await outputTextOf((await t.store.tasks.find(id))!, t.store.outputs))!;
    expect(stored.length).toBeGreaterThan(256 * 1024);
    const v = await signedIn(t, apiKey);
    const parse = vi.spyOn(JSON, "parse");
    try {
      const page = await v.page(`/dashboard/tasks/${id}`);
      expect(parse.mock.calls.filter(([text]) => text === stored)).toEqual([]);
      expect(page).toContain(
        `<p class="muted">The output is ${stored.length.toLocaleString("en-US")} characters of JSON: its first 65,536 are shown. Read it whole with <code>GET /openapi/v1/tasks/${id}</code>.</p>`,
      );
      expect(page).toContain(
        `<pre>{&quot;note&quot;:&quot;http://plain.test/x.png&quot;,&quot;images&quot;:[{&quot;url`,
      );
      expect(page).toContain('<img src="https://files.upstream.test/out/0.png" alt="Image output of');
      expect(page).toContain('<img src="https://files.upstream.test/out/11.png" alt="Image output of');
      expect(page.match(/<img src="https:\/\/files\.upstream\.test\/out\/\d+\.png"/g)).toHaveLength(12);
      expect(page).toContain('<a href="http://plain.test/x.png" rel="noreferrer">');
    } finally {
      parse.mockRestore();
    }
  });

  it("Redeliver queues the last event again; after the dispatcher runs the page shows the second attempt with the same webhook-id", async () => {
    const { t, up } = setup();
    const r = await receiver();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_url: r.url() });
    await succeed(t, up, apiKey, id, { images: [{ url: "https://cdn.test/a.png" }] });
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    const res = await v.submit(`/dashboard/tasks/${id}`, `/dashboard/tasks/${id}/redeliver`);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe(`/dashboard/tasks/${id}?done=redelivered`);
    const pending = await v.page(res.headers.get("location")!);
    expect(pending).toContain("The last event is queued for delivery again");
    expect(pending).toContain('<meta name="genrelay-refresh" content="3000">');
    await t.relay.dispatcher.runOnce();
    const after = await v.page(`/dashboard/tasks/${id}`);
    const ids = [...after.matchAll(/<td>attempt: task.succeeded[\s\S]*?<td class="mono">(evt_\w+)<\/td>/g)].map(
      (m) => m[1],
    );
    expect(ids).toHaveLength(2);
    expect(ids[0]).toBe(ids[1]);
    expect(r.requests.map((q) => q.headers["webhook-id"])).toEqual(ids);
  });

  it("Redeliver on a task without a callback shows the API's refusal (400)", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const v = await signedIn(t, apiKey);
    const page = await v.page(`/dashboard/tasks/${id}`);
    expect(page).not.toContain(">Redeliver</button>");
    const res = await v.post(`/dashboard/tasks/${id}/redeliver`, { csrf: csrfOf(page) });
    expect(res.status).toBe(400);
    expect(await res.text()).toContain("This task has no callback_url or endpoint to deliver to.");
  });

  it("Cancel (#21) is offered only on a task never submitted upstream, asks on a page of its own, and cancels only from that page's form", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const waiting = await createTask(t, apiKey);
    const v = await signedIn(t, apiKey);
    const taskPath = `/dashboard/tasks/${waiting}`;
    const before = await v.page(taskPath);
    expect(before).toContain(`<a class="btn danger" href="${taskPath}/cancel">Cancel…</a>`);
    // A POST that did not come from the confirm page (an old form, a bare request) asks first.
    const unconfirmed = await v.post(`${taskPath}/cancel`, { csrf: csrfOf(before) });
    expect(unconfirmed.status).toBe(303);
    expect(unconfirmed.headers.get("location")).toBe(`${taskPath}/cancel`);
    expect((await readTask(t, apiKey, waiting)).data.status).toBe("queued");
    const confirm = await v.page(`${taskPath}/cancel`);
    expect(confirm).toContain("<h1>Cancel this task?</h1>");
    expect(confirm).toMatch(
      new RegExp(
        `<form class="actions" method="post" action="${taskPath}/cancel"><input type="hidden" name="csrf" value="[^"]+"><input type="hidden" name="confirm" value="yes">`,
      ),
    );
    expect(confirm).not.toContain("<script>");
    const res = await v.submit(`${taskPath}/cancel`, `${taskPath}/cancel`, { confirm: "yes" });
    expect(res.status).toBe(303);
    const page = await v.page(res.headers.get("location")!);
    expect(page).toContain("The task is canceled.");
    expect((await readTask(t, apiKey, waiting)).data.status).toBe("canceled");
    expect(page).not.toContain("Cancel…");
    const ended = await v.get(`${taskPath}/cancel`);
    expect(ended.status).toBe(409);
    expect(await ended.text()).toContain("The task has already ended (canceled).");

    // Submitted upstream but still queued there: not terminal, yet no longer cancelable.
    const submitted = await createTask(t, apiKey);
    await t.relay.submitter.runOnce();
    expect((await readTask(t, apiKey, submitted)).data.status).toBe("queued");
    const submittedPage = await v.page(`/dashboard/tasks/${submitted}`);
    expect(submittedPage).not.toContain("Cancel…");
    const asked = await v.get(`/dashboard/tasks/${submitted}/cancel`);
    expect(asked.status).toBe(409);
    expect(await asked.text()).toContain("The task was already submitted upstream, which offers no cancel");
    const refused = await v.post(`/dashboard/tasks/${submitted}/cancel`, {
      csrf: csrfOf(submittedPage),
      confirm: "yes",
    });
    expect(refused.status).toBe(409);
    expect(await refused.text()).toContain("The task was already submitted upstream, which offers no cancel");
    expect((await readTask(t, apiKey, submitted)).data.status).toBe("queued");
  });

  it("shows each attempt's answer body (escaped) and when a pending event's next attempt is due (#21)", async () => {
    const { t, up } = setup();
    const r = await receiver();
    r.answers.push((_req, res) => {
      res.writeHead(503, { "Content-Type": "text/html" });
      res.end("<script>alert(1)</script> busy & cold-starting");
    });
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey, { callback_url: r.url("/hook") });
    await succeed(t, up, apiKey, id, { images: [{ url: "https://cdn.test/a.png" }] });
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    const [event] = await t.store.events.ofTask(id);
    expect(event).toMatchObject({ deliveryStatus: "pending", attempts: 1 });
    const page = await v.page(`/dashboard/tasks/${id}`);
    expect(page).toContain(
      '<details class="answer"><summary>Answer body (46 bytes)</summary><pre>&lt;script&gt;alert(1)&lt;/script&gt; busy &amp; cold-starting</pre></details>',
    );
    expect(page).not.toContain("<script>alert(1)");
    expect(page).toMatch(/<td><span class="badge b-failed">failed<\/span> 503<\/td><td>\d+ ms<\/td>/);
    const due = event!.nextAttemptAt!;
    const wait = due - t.clock.now();
    expect(page).toContain(
      `<span class="badge b-pending">pending</span> <span class="muted next-attempt">next attempt <time datetime="${new Date(due).toISOString()}">`,
    );
    expect(page).toContain(`(in ${(wait / 1000).toFixed(1)} s)</span>`);
    expect(page).toMatch(/<span class="muted last-failure">last attempt failed: [^<]*503[^<]*<\/span>/);
    t.clock.advance(wait + 1);
    expect(await v.page(`/dashboard/tasks/${id}`)).toContain(
      '<span class="muted next-attempt">next attempt due now</span>',
    );
    // Delivered on the retry: no next attempt any more; the 2xx's own body is shown too.
    await t.relay.dispatcher.runOnce();
    const after = await v.page(`/dashboard/tasks/${id}`);
    expect(after).not.toContain("next attempt");
    expect(after).toContain("<summary>Answer body (2 bytes)</summary><pre>ok</pre>");
  });

  it("a pending event says why its last attempt failed: a receiver that refuses connections is named, not a bare pending (#39)", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const closed = await freePort(); // nothing listens there: the connection is refused
    const id = await createTask(t, apiKey, { callback_url: `http://127.0.0.1:${closed}/hook` });
    await succeed(t, up, apiKey, id, { images: [{ url: "https://cdn.test/a.png" }] });
    await t.relay.dispatcher.runOnce();
    const [attempt] = await t.store.events.attemptsOfTask(id);
    expect(attempt?.error).toMatch(/refused/i);
    const page = await (await signedIn(t, apiKey)).page(`/dashboard/tasks/${id}`);
    expect(page).toContain(`<br><span class="muted last-failure">last attempt failed: ${attempt!.error}</span>`);
  });

  it("filters 'delivery failing': tasks whose last webhook failed or is retrying after a failed attempt (#21)", async () => {
    const { t, up } = setup({ WEBHOOK_RETRY_SCHEDULE: "0s,5s" });
    const good = await receiver();
    const bad = await receiver(status(500));
    const { apiKey } = t.client();
    const delivered = await createTask(t, apiKey, { callback_url: good.url() });
    const retrying = await createTask(t, apiKey, { callback_url: bad.url() });
    const noCallback = await createTask(t, apiKey);
    for (const id of [delivered, retrying, noCallback]) await succeed(t, up, apiKey, id, { images: [] });
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    expect(rowIds(await v.page("/dashboard?delivery=failing"))).toEqual([retrying]);
    // Exhausted (failed) stays in the filter; a new task's untried webhook is not failing yet.
    t.clock.advance(10_000);
    await t.relay.dispatcher.runOnce();
    expect((await t.store.events.lastOfTask(retrying))?.deliveryStatus).toBe("failed");
    const fresh = await createTask(t, apiKey, { callback_url: bad.url() });
    await succeed(t, up, apiKey, fresh, { images: [] });
    const page = await v.page("/dashboard?delivery=failing");
    expect(rowIds(page)).toEqual([retrying]);
    expect(page).toContain('<option value="failing" selected>');
    expect(rowIds(await v.page("/dashboard?delivery=failing&type=video"))).toEqual([]);
    expect(rowIds(await v.page("/dashboard?delivery=bogus"))).toEqual([fresh, noCallback, retrying, delivered]);
  });
});

describe("dashboard: a running task's page follows its event stream", () => {
  it("carries a stream URL with a token for that task alone while it runs, none once it ended", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    const other = await createTask(t, apiKey);
    const v = await signedIn(t, apiKey);
    const page = await v.page(`/dashboard/tasks/${id}`);
    const url = /<meta name="genrelay-stream" content="([^"]+)">/.exec(page)?.[1]?.replaceAll("&amp;", "&");
    expect(url).toMatch(new RegExp(`^/openapi/v1/tasks/${id}/events\\?token=gst_[A-Za-z0-9_.-]+$`));
    const res = await t.request(null, url!);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    await res.body?.cancel();
    const token = url!.split("token=")[1];
    expect((await t.request(null, `/openapi/v1/tasks/${other}/events?token=${token}`)).status).toBe(401);
    await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    expect(await v.page(`/dashboard/tasks/${id}`)).not.toContain("genrelay-stream");
  });
});

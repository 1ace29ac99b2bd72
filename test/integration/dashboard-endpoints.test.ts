import { describe, expect, it } from "vitest";
import { openQueueTarget } from "../../src/services/queue-endpoints.js";
import { csrfOf, signedIn, type Visitor } from "../helpers/dashboard.js";
import { createTask } from "../helpers/flow.js";
import { status } from "../helpers/receiver.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/** The dashboard's Webhooks page lists, adds and removes endpoints (docs/contract.md, "Endpoints"). */
const { setup, receiver } = upstreamSuite();

/** Posts the add form as a browser does (one `events` field per box ticked); other fields as given. */
async function addEndpoint(v: Visitor, fields: { events?: string[] } & Record<string, string | string[] | undefined>) {
  const form = new URLSearchParams({ csrf: csrfOf(await v.page("/dashboard/webhooks")) });
  for (const [name, value] of Object.entries(fields)) for (const one of [value ?? []].flat()) form.append(name, one);
  return v.request("/dashboard/webhooks/endpoints", {
    method: "POST",
    body: form,
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
  });
}

const rows = (page: string) =>
  [
    ...page.matchAll(
      /<tr><td data-label="URL" class="mono">([^<]+)<\/td><td data-label="Events">([^<]+)<\/td>\s*<td data-label="Description">([^<]*)<\/td>/g,
    ),
  ].map((m) => ({ url: m[1], events: m[2], description: m[3] }));

describe("dashboard: endpoints on the webhooks page", () => {
  it("adds an endpoint with its events ticked, lists it as the API does, and removes it", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    expect(await v.page("/dashboard/webhooks")).toContain('<p id="no-endpoints">No endpoint yet.</p>');
    const added = await addEndpoint(v, {
      url: "https://hooks.example.com/make",
      description: "Make scenario",
      events: ["task.succeeded", "task.failed"],
    });
    const page = await added.text();
    expect(added.status, page.slice(0, 300)).toBe(200);
    const listed = (await (await t.request(apiKey, "/openapi/v1/webhooks/endpoints")).json()) as { data: any[] };
    expect(listed.data).toMatchObject([
      {
        url: "https://hooks.example.com/make",
        events: ["task.succeeded", "task.failed"],
        description: "Make scenario",
      },
    ]);
    const id = listed.data[0].id as string;
    expect(page).toContain(`Endpoint ${id} added.`);
    expect(rows(page)).toEqual([
      { url: "https://hooks.example.com/make", events: "task.succeeded, task.failed", description: "Make scenario" },
    ]);
    // Its host is one of the callback hosts the page watches.
    expect(page).toContain('<td data-label="Host" class="mono">hooks.example.com:443</td>');

    const removed = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/endpoints/delete", { id });
    const after = await removed.text();
    expect(removed.status).toBe(200);
    expect(after).toContain(`Endpoint ${id} removed`);
    expect(rows(after)).toEqual([]);
    expect((await t.request(apiKey, `/openapi/v1/webhooks/endpoints/${id}`)).status).toBe(404);
  });

  it("adds a RabbitMQ endpoint with its password, lists its kind and address without it, and removes it", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    expect(await v.page("/dashboard/webhooks")).toContain('<select id="endpoint-type" name="type">');
    const added = await addEndpoint(v, {
      type: "amqp",
      url: "",
      amqp_url: "amqps://mq.example.com:5671/prod",
      exchange: "genrelay",
      amqp_user: "app",
      amqp_password: "pa55-never-shown",
      events: ["task.succeeded"],
    });
    const page = await added.text();
    expect(added.status, page.slice(0, 300)).toBe(200);
    const listed = (await (await t.request(apiKey, "/openapi/v1/webhooks/endpoints")).json()) as { data: any[] };
    const id = listed.data[0].id as string;
    expect(listed.data).toEqual([
      {
        id,
        type: "amqp",
        url: "amqps://mq.example.com:5671/prod",
        exchange: "genrelay",
        routing_key: null,
        events: ["task.succeeded"],
        description: null,
        created_at: new Date(t.clock.now()).toISOString(),
      },
    ]);
    expect(page).toContain(`Endpoint ${id} added.`);
    expect(rows(page)).toEqual([
      { url: "amqps://mq.example.com:5671/prod", events: "task.succeeded", description: "—" },
    ]);
    expect(page).toContain(
      '<td data-label="Kind">amqp <span class="muted">exchange <code>genrelay</code>, routing key the event type</span></td>',
    );
    // The password reached the sealed target, and is on no page.
    const row = t.database.sqlite.prepare("SELECT destination FROM webhook_endpoints WHERE id = ?").get(id) as {
      destination: string;
    };
    expect(openQueueTarget(row, t.config.encryptionKey)).toEqual({
      kind: "amqp",
      amqp: { url: "amqps://app:pa55-never-shown@mq.example.com:5671/prod", exchange: "genrelay", routingKey: null },
    });
    expect(page).not.toContain("pa55-never-shown");
    expect(await v.page("/dashboard/webhooks")).not.toContain("pa55-never-shown");

    const removed = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/endpoints/delete", { id });
    const after = await removed.text();
    expect(removed.status).toBe(200);
    expect(after).toContain(`Endpoint ${id} removed`);
    expect(rows(after)).toEqual([]);
  });

  it("a refused NATS endpoint keeps its kind and fields, never its token", async () => {
    const { t } = setup();
    const { apiKey } = t.client();
    const v = await signedIn(t, apiKey);
    const refused = await addEndpoint(v, {
      type: "nats",
      nats_url: "nats://nats.example.com:4222",
      subject: "genrelay.*",
      nats_token: "tok-never-shown",
    });
    const page = await refused.text();
    expect(refused.status).toBe(422);
    expect(page).toContain('<div class="notice error" role="alert">Some nats settings are invalid.</div>');
    expect(page).toContain('<option value="nats" selected>');
    expect(page).toContain('name="nats_url" type="text" value="nats://nats.example.com:4222"');
    expect(page).toContain('name="subject" type="text" value="genrelay.*"');
    expect(page).toContain('name="nats_token" type="password" value="" autocomplete="off"');
    expect(page).not.toContain("tok-never-shown");
    expect(((await (await t.request(apiKey, "/openapi/v1/webhooks/endpoints")).json()) as { data: [] }).data).toEqual(
      [],
    );
  });

  it("the task page shows each delivery's destination; its delivery summary is the callback's", async () => {
    const { t, up } = setup();
    const { apiKey } = t.client();
    const cb = await receiver();
    const down = await receiver(status(503));
    const created = await t.request(apiKey, "/openapi/v1/webhooks/endpoints", {
      method: "POST",
      json: { url: down.url("/down") },
    });
    const { id: endpointId } = ((await created.json()) as { data: { id: string } }).data;
    const id = await createTask(t, apiKey, { callback_url: cb.url("/cb") });
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: {} });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    await t.relay.dispatcher.runOnce();
    const v = await signedIn(t, apiKey);
    const page = await v.page(`/dashboard/tasks/${id}`);
    expect(page).toContain(`attempt: task.succeeded <span class="muted destination">to ${endpointId}</span>`);
    expect(page).toContain('attempt: task.succeeded <span class="muted destination">to callback</span>');
    expect(page).toMatch(/<dt>Delivery<\/dt><dd><span class="badge b-succeeded">succeeded<\/span> 1 attempt/);
    // Both rows show the one webhook-id the two destinations got.
    const ids = [...page.matchAll(/<td class="mono">(evt_[0-9a-z]+)<\/td><\/tr>/g)].map((m) => m[1]);
    expect(new Set(ids).size).toBe(1);
  });

  it("shows a refused URL with the API's status and keeps the form; another client's endpoint cannot be removed", async () => {
    const { t } = setup({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "false" });
    const a = t.client("a");
    const b = t.client("b");
    const v = await signedIn(t, b.apiKey);
    const refused = await addEndpoint(v, { url: "http://127.0.0.1:9/x", events: ["task.canceled"] });
    const page = await refused.text();
    expect(refused.status).toBe(400);
    expect(page).toMatch(/<div class="notice error" role="alert">url is not acceptable: [^<]+<\/div>/);
    expect(page).toContain('value="http://127.0.0.1:9/x"');
    expect(page).toMatch(/value="task.canceled" checked/);
    expect(page).not.toMatch(/value="task.succeeded" checked/);

    const created = await t.request(a.apiKey, "/openapi/v1/webhooks/endpoints", {
      method: "POST",
      json: { url: "https://hooks.example.com/a" },
    });
    const { id } = ((await created.json()) as { data: { id: string } }).data;
    const res = await v.submit("/dashboard/webhooks", "/dashboard/webhooks/endpoints/delete", { id });
    expect(res.status).toBe(404);
    expect((await t.request(a.apiKey, `/openapi/v1/webhooks/endpoints/${id}`)).status).toBe(200);
  });
});

import { afterEach, describe, expect, it } from "vitest";
import { FakeUpstream } from "../helpers/fake-upstream.js";
import { createTask } from "../helpers/flow.js";
import { startReceiver } from "../helpers/receiver.js";
import { createTestRelay, type TestRelay } from "../helpers/relay.js";
import { mswServer } from "../helpers/upstream-suite.js";

const server = mswServer();

/** Reads one sample from a Prometheus exposition: the value of `name{labels}` (labels in any order). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[3] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[4]);
  }
  return undefined;
}

describe("/metrics and /readyz", () => {
  let t: TestRelay;
  afterEach(async () => {
    await t.close();
  });

  it("after a small run, every metric family is there with plausible values", async () => {
    t = createTestRelay({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
    const up = new FakeUpstream(t.clock);
    server.use(...up.handlers());
    const receiver = await startReceiver();
    try {
      const { apiKey } = t.client();
      const ids = [
        await createTask(t, apiKey, { callback_url: receiver.url() }),
        await createTask(t, apiKey, { callback_url: receiver.url() }),
      ];
      await createTask(t, apiKey); // stays waiting: no worker runs after this
      up.maxConcurrent = 2;
      await t.relay.submitter.runOnce(); // two submitted, the third answered 429 concurrent_limit
      up.finishAll("succeeded");
      t.clock.advance(3_000);
      await t.relay.poller.runOnce();
      await t.relay.dispatcher.runOnce();
      expect(receiver.requests.length).toBe(ids.length);
      await t.request(apiKey, `/openapi/v1/tasks/${ids[0]}`);

      const res = await t.request(null, "/metrics");
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/text\/plain/);
      const text = await res.text();
      expect(
        sample(text, "genrelay_http_requests_total", {
          route: "/openapi/v1/images/generations",
          method: "POST",
          status: "201",
        }),
      ).toBe(3);
      expect(
        sample(text, "genrelay_http_requests_total", { route: "/openapi/v1/tasks/:id", method: "GET", status: "200" }),
      ).toBe(1);
      expect(
        sample(text, "genrelay_http_request_duration_seconds_count", {
          route: "/openapi/v1/images/generations",
          method: "POST",
        }),
      ).toBe(3);
      expect(sample(text, "genrelay_tasks", { status: "succeeded" })).toBe(2);
      expect(sample(text, "genrelay_tasks", { status: "queued" })).toBe(1);
      expect(sample(text, "genrelay_upstream_tasks", { account: "default", phase: "waiting" })).toBe(1);
      expect(sample(text, "genrelay_upstream_calls_total", { endpoint: "create", outcome: "ok" })).toBe(2);
      expect(sample(text, "genrelay_upstream_calls_total", { endpoint: "create", outcome: "concurrent_limit" })).toBe(
        1,
      );
      expect(sample(text, "genrelay_upstream_concurrent_limit_waits_total")).toBe(1);
      expect(sample(text, "genrelay_upstream_reads_used", { account: "default" })).toBeGreaterThanOrEqual(1);
      expect(sample(text, "genrelay_upstream_read_budget", { account: "default" })).toBe(100);
      expect(sample(text, "genrelay_webhook_attempts_total", { outcome: "succeeded" })).toBe(2);
      expect(sample(text, "genrelay_webhook_delivery_latency_seconds_count")).toBe(2);
      expect(sample(text, "genrelay_deliveries", { status: "pending" })).toBe(0);
      expect(sample(text, "genrelay_deliveries", { status: "failed" })).toBe(0);
      expect(sample(text, "genrelay_worker_lag_seconds_count", { worker: "submitter" })).toBeGreaterThanOrEqual(2);
      expect(text).toMatch(/^genrelay_process_resident_memory_bytes \d+/m);
    } finally {
      await receiver.close();
    }
  });

  it("/readyz: ready with the loops running, unready when the database is read-only or a loop stopped", async () => {
    t = createTestRelay();
    const notStarted = await t.request(null, "/readyz");
    expect(notStarted.status).toBe(503);
    expect(((await notStarted.json()) as { problems: string[] }).problems).toContain("worker submitter not running");

    await t.relay.start();
    const ready = await t.request(null, "/readyz");
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ok" });

    t.database.sqlite.pragma("query_only = ON");
    const readOnly = await t.request(null, "/readyz");
    expect(readOnly.status).toBe(503);
    const body = (await readOnly.json()) as { status: string; problems: string[] };
    expect(body.status).toBe("unavailable");
    expect(body.problems.some((p) => p.startsWith("database not writable"))).toBe(true);
    t.database.sqlite.pragma("query_only = OFF");

    // A stalled loop: no heartbeat for more than two minutes of the clock.
    t.clock.advance(121_000);
    const stalled = await t.request(null, "/readyz");
    expect(stalled.status).toBe(503);
    expect(((await stalled.json()) as { problems: string[] }).problems.some((p) => /stalled/.test(p))).toBe(true);
  });
});

import { describe, expect, it } from "vitest";
import { readTask, succeededTask } from "../helpers/flow.js";
import { status } from "../helpers/receiver.js";
import type { TestRelay } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * A receiver ends an event's retries for good with `410 Gone` or with the header
 * `webhook-delivery: abort` on any non-2xx answer (docs/contract.md, "Retries"); the attempt log
 * says so, and the event is failed (still redeliverable by hand). On a 2xx the header changes
 * nothing: the event is delivered.
 */

const { setup, receiver } = upstreamSuite();

/** Longer than every step of the suite's schedule (0s, 5s, 1m) with its jitter. */
const PAST_SCHEDULE = 2 * 60 * 60_000;

/** Runs the dispatcher until nothing is due, advancing the clock past every retry in between. */
async function deliverAll(t: TestRelay) {
  for (let round = 0; round < 5; round++) {
    await t.relay.dispatcher.runOnce();
    t.clock.advance(PAST_SCHEDULE);
  }
}

async function attempts(t: TestRelay, apiKey: string, id: string): Promise<any[]> {
  const res = await t.request(apiKey, `/openapi/v1/tasks/${id}/deliveries`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: any[] }).data;
}

describe("ending retries from the receiver", () => {
  it.each([
    [500, { "webhook-delivery": "abort" }, "aborted (HTTP 500, webhook-delivery: abort)"],
    [429, { "Webhook-Delivery": " Abort ", "retry-after": "60" }, "aborted (HTTP 429, webhook-delivery: abort)"],
    [
      302,
      { "webhook-delivery": "abort", location: "http://127.0.0.1:1/" },
      "aborted (HTTP 302, webhook-delivery: abort)",
    ],
    [410, {}, "gone (410)"],
  ])(
    "a %i with %o: one attempt, no retry, failed, and the log says the receiver ended it",
    async (code, headers, said) => {
      const { t, up } = setup();
      const r = await receiver(status(code, headers as Record<string, string>));
      const client = t.client();
      const id = await succeededTask(t, up, client.apiKey, { callback_url: r.url() });

      await deliverAll(t);

      expect(r.requests).toHaveLength(1);
      const log = await attempts(t, client.apiKey, id);
      expect(log).toHaveLength(1);
      expect(log[0]).toMatchObject({ outcome: "failed", status_code: code });
      expect(log[0].error).toBe(`${said}: the receiver asked for no more deliveries`);
      expect((await readTask(t, client.apiKey, id)).data.callback.delivery).toMatchObject({
        status: "failed",
        attempts: 1,
        last_status_code: code,
      });
    },
  );

  it("a 500 without the header, or with another value, is retried on the schedule", async () => {
    const { t, up } = setup();
    const r = await receiver(status(500, { "webhook-delivery": "retry" }));
    const client = t.client();
    const id = await succeededTask(t, up, client.apiKey, { callback_url: r.url() });

    await deliverAll(t);

    expect(r.requests).toHaveLength(3); // WEBHOOK_RETRY_SCHEDULE "0s,5s,1m": three attempts
    expect((await attempts(t, client.apiKey, id)).map((a) => a.error)).toEqual(["HTTP 500", "HTTP 500", "HTTP 500"]);
    expect((await readTask(t, client.apiKey, id)).data.callback.delivery).toMatchObject({
      status: "failed",
      attempts: 3,
    });
  });

  it("a 2xx with webhook-delivery: abort is simply delivered", async () => {
    const { t, up } = setup();
    const r = await receiver(status(200, { "webhook-delivery": "abort" }));
    const client = t.client();
    const id = await succeededTask(t, up, client.apiKey, { callback_url: r.url() });

    await deliverAll(t);

    expect(r.requests).toHaveLength(1);
    expect(await attempts(t, client.apiKey, id)).toMatchObject([
      { outcome: "succeeded", status_code: 200, error: null },
    ]);
    expect((await readTask(t, client.apiKey, id)).data.callback.delivery).toMatchObject({ status: "succeeded" });
  });

  it("an aborted event can still be redelivered by hand", async () => {
    const { t, up } = setup();
    const r = await receiver(status(503, { "webhook-delivery": "abort" }));
    const client = t.client();
    const id = await succeededTask(t, up, client.apiKey, { callback_url: r.url() });
    await deliverAll(t);
    expect(r.requests).toHaveLength(1);

    r.fallback = status(204);
    const res = await t.request(client.apiKey, `/openapi/v1/tasks/${id}/redeliver`, { method: "POST" });
    expect(res.status).toBeLessThan(300);
    await deliverAll(t);

    expect(r.requests).toHaveLength(2);
    expect((await readTask(t, client.apiKey, id)).data.callback.delivery).toMatchObject({ status: "succeeded" });
  });
});

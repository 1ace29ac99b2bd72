import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { find as findClient } from "../../src/db/sqlite/clients.js";
import { claimDue as claimDueTasks, nextDueAt } from "../../src/db/sqlite/task-claims.js";
import { createTask, taskRow } from "../helpers/flow.js";
import { verifyAt } from "../helpers/receiver.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

const suite = upstreamSuite();

describe("recovery after a kill -9", () => {
  it("leases left by a dead process are released at start, and the loop wakes at a lease's expiry, not the idle timer", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const id = await createTask(t, apiKey);
    // A previous process claimed the task and died.
    const claimed = claimDueTasks(t.database.db, {
      phase: "waiting",
      account: "default",
      now: t.clock.now(),
      leaseMs: 35_000,
      token: "dead:1",
      limit: 10,
    });
    expect(claimed.map((c) => c.id)).toEqual([id]);
    expect(nextDueAt(t.database.db, "waiting", t.clock.now())).toBe(t.clock.now() + 35_001);
    await t.relay.recover();
    expect(taskRow(t, id)).toMatchObject({ claimToken: null, claimedUntil: null });
    expect(nextDueAt(t.database.db, "waiting", t.clock.now())).toBe(taskRow(t, id).nextRunAt);
  });
});

describe("secrets and tenants at rest", () => {
  it("with RELAY_ENCRYPTION_KEY, webhook secrets are stored sealed and webhooks still verify with the plain secret", async () => {
    const { t, up } = suite.setup({ RELAY_ENCRYPTION_KEY: randomBytes(32).toString("base64") });
    const r = await suite.receiver();
    const client = t.client();
    expect(client.secret).toMatch(/^whsec_/);
    const stored = findClient(t.database.db, client.id)!.webhookSecret;
    expect(stored.startsWith("enc:v1:")).toBe(true);
    expect(stored).not.toContain(client.secret.slice(6));
    const id = await createTask(t, client.apiKey, { callback_url: r.url() });
    await t.relay.submitter.runOnce();
    up.set(up.taskOf(id)!.id, { status: "succeeded", output: { images: ["https://cdn.test/a.png"] } });
    t.clock.advance(3_000);
    await t.relay.poller.runOnce();
    await t.relay.dispatcher.runOnce();
    expect(r.requests).toHaveLength(1);
    expect(verifyAt(client.secret, r.requests[0]!, t.clock.now())).toMatchObject({ type: "task.succeeded" });
  });

  it("the events feed cursor is per client: it counts only the caller's own events", async () => {
    const { t } = suite.setup();
    const a = t.client("a");
    const b = t.client("b");
    for (let i = 0; i < 3; i++) await t.relay.lifecycle.cancel(taskRow(t, await createTask(t, a.apiKey)), null);
    await t.relay.lifecycle.cancel(taskRow(t, await createTask(t, b.apiKey)), null);
    const feed = (await (await t.request(b.apiKey, "/openapi/v1/events")).json()) as {
      data: unknown[];
      next_cursor: string;
    };
    expect(feed.data).toHaveLength(1);
    // B's cursor says "after B's first event", nothing about the three of A's written before it.
    expect(Buffer.from(feed.next_cursor, "base64url").toString()).toBe("c1");
    const again = (await (await t.request(b.apiKey, `/openapi/v1/events?after=${feed.next_cursor}`)).json()) as {
      data: unknown[];
    };
    expect(again.data).toEqual([]);
    const aFeed = (await (await t.request(a.apiKey, "/openapi/v1/events?limit=2")).json()) as {
      data: unknown[];
      next_cursor: string;
    };
    expect(aFeed.data).toHaveLength(2);
    const aRest = (await (await t.request(a.apiKey, `/openapi/v1/events?after=${aFeed.next_cursor}`)).json()) as {
      data: unknown[];
    };
    expect(aRest.data).toHaveLength(1);
  });
});

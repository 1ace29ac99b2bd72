import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { find as findTask, findOfClient as findClientTask } from "../../src/db/sqlite/tasks.js";
import { find as findEvent, lastOfTask as lastEventOfTask, update as updateEvent } from "../../src/db/sqlite/events.js";
import { createTestRelay, imageBody, type TestRelay, transitionTask } from "../helpers/relay.js";

const DAY = 24 * 60 * 60 * 1000;

describe("retention", () => {
  let t: TestRelay;
  beforeEach(() => {
    t = createTestRelay({ TASK_RETENTION_DAYS: "30", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
  });
  afterEach(async () => {
    await t.close();
  });

  async function createTask(apiKey: string, key: string, callback = true): Promise<string> {
    const res = await t.request(apiKey, "/openapi/v1/images/generations", {
      method: "POST",
      idempotencyKey: key,
      json: imageBody(callback ? { callback_url: "http://127.0.0.1:9/hook" } : {}),
    });
    expect(res.status).toBe(201);
    return ((await res.json()) as { data: { id: string } }).data.id;
  }

  function finish(id: string, deliveryStatus: "succeeded" | "pending" | "failed" | null): void {
    const db = t.database.db;
    const task = findTask(db, id)!;
    const now = t.clock.now();
    transitionTask(
      db,
      task,
      { status: "succeeded", phase: "done", completedAt: now, updatedAt: now, nextRunAt: null },
      { now },
    );
    const event = lastEventOfTask(db, id);
    if (event && deliveryStatus) updateEvent(db, event.id, { deliveryStatus });
  }

  it("removes exactly the finished, settled tasks past retention, with their events", async () => {
    const { id: clientId, apiKey } = t.client();
    const oldDelivered = await createTask(apiKey, "retention-1");
    const oldFailedDelivery = await createTask(apiKey, "retention-2");
    const oldPendingDelivery = await createTask(apiKey, "retention-3");
    const oldWaiting = await createTask(apiKey, "retention-4");
    const oldNoCallback = await createTask(apiKey, "retention-5", false);
    finish(oldDelivered, "succeeded");
    finish(oldFailedDelivery, "failed");
    finish(oldPendingDelivery, "pending");
    finish(oldNoCallback, null);
    const deliveredEvent = lastEventOfTask(t.database.db, oldDelivered)!;

    t.clock.advance(29 * DAY);
    const recent = await createTask(apiKey, "retention-6");
    finish(recent, "succeeded");
    expect(await t.relay.pruner.runOnce()).toBe(0);

    t.clock.advance(1 * DAY + 1);
    expect(await t.relay.pruner.runOnce()).toBe(3);
    const db = t.database.db;
    for (const gone of [oldDelivered, oldFailedDelivery, oldNoCallback])
      expect(findClientTask(db, clientId, gone)).toBeUndefined();
    for (const kept of [oldPendingDelivery, oldWaiting, recent])
      expect(findClientTask(db, clientId, kept)).toBeDefined();
    expect(findEvent(db, deliveredEvent.id)).toBeUndefined();
    expect(await t.relay.pruner.runOnce()).toBe(0);
  });
});

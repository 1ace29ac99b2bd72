import { randomUUID } from "node:crypto";
import { expect } from "vitest";
import { find as findTask } from "../../src/db/sqlite/tasks.js";
import type { Store } from "../../src/store/store.js";
import type { TaskRow } from "../../src/store/rows.js";
import type { FakeUpstream } from "./fake-upstream.js";
import { imageBody, videoBody, type TestRelay } from "./relay.js";

/** Creates a task through the API (expects 201) and returns its id. */
export async function createTask(
  t: Pick<TestRelay, "request">,
  apiKey: string,
  extra: Record<string, unknown> = {},
  opts: { type?: "image" | "video"; idempotencyKey?: string } = {},
): Promise<string> {
  const type = opts.type ?? "image";
  const res = await t.request(apiKey, `/openapi/v1/${type}s/generations`, {
    method: "POST",
    json: type === "image" ? imageBody(extra) : videoBody(extra),
    idempotencyKey: opts.idempotencyKey ?? `key-${randomUUID()}`,
  });
  const body = (await res.json()) as { data: { id: string } };
  expect(res.status, JSON.stringify(body)).toBe(201);
  return body.data.id;
}

/** GET /openapi/v1/tasks/{id} (expects 200). */
export async function readTask(t: Pick<TestRelay, "request">, apiKey: string, id: string): Promise<any> {
  const res = await t.request(apiKey, `/openapi/v1/tasks/${id}`);
  const body = await res.json();
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body;
}

/** The stored row, for what the API does not show (phase, next_run_at). */
export function taskRow(t: TestRelay, id: string): TaskRow {
  const row = findTask(t.database.db, id);
  if (!row) throw new Error(`no task ${id}`);
  return row;
}

/** The stored row through the store's contract (either database). */
export async function storedTask(t: { store: Pick<Store, "tasks"> }, id: string): Promise<TaskRow> {
  const row = await t.store.tasks.find(id);
  if (!row) throw new Error(`no task ${id}`);
  return row;
}

export async function json(res: Response): Promise<any> {
  return res.json();
}

/** Submits a created task, has the upstream finish it, reads it once and runs the dispatcher once. */
export async function runToWebhook(t: Pick<TestRelay, "relay" | "clock">, up: FakeUpstream, id: string): Promise<void> {
  await t.relay.submitter.runOnce();
  up.set(up.taskOf(id)!.id, { status: "succeeded", output: { images: [{ url: "https://cdn.test/a.png" }] } });
  t.clock.advance(2_000);
  await t.relay.poller.runOnce();
  await t.relay.dispatcher.runOnce();
}

/**
 * Moves the clock to the next due delivery and runs the dispatcher once: a retry's time is drawn
 * with jitter (WEBHOOK_RETRY_SCHEDULE ±20 %), so a fixed step can fall short of it; the outbox says
 * when the next attempt is due. Fails when nothing is due.
 */
export async function runNextRetry(t: Pick<TestRelay, "relay" | "clock" | "store">): Promise<void> {
  const now = t.clock.now();
  const due = await t.store.events.nextDueAt({ now, excludeKeys: [] });
  expect(due, "no delivery is due").not.toBeNull();
  t.clock.advance(Math.max(0, due! - now));
  await t.relay.dispatcher.runOnce();
}

/**
 * A task created with `extra`, submitted, and read back `succeeded` from the fake upstream (an image
 * output, 20 points charged): its `task.succeeded` event is written and due.
 */
export async function succeededTask(
  t: Pick<TestRelay, "relay" | "clock" | "request">,
  up: FakeUpstream,
  apiKey: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const id = await createTask(t, apiKey, extra);
  await t.relay.submitter.runOnce();
  up.set(up.taskOf(id)!.id, {
    status: "succeeded",
    output: { images: [{ url: "https://cdn.test/fox.png" }] },
    usage: { points_charged: 20, points_refunded: 0 },
  });
  t.clock.advance(2_000);
  await t.relay.poller.runOnce();
  return id;
}

import type http from "node:http";
import { lastOfTask as lastEventOfTask } from "../../src/db/sqlite/events.js";
import type { EventRow } from "../../src/store/rows.js";
import { FakeClock } from "./fake-clock.js";
import { createTask, taskRow } from "./flow.js";
import { ok, startReceiver, type Answer, type Received, type Receiver } from "./receiver.js";
import { transitionTask, type TestRelay } from "./relay.js";

/**
 * Helpers for delivery tests that need real time: a hanging or slow attempt only ends when the
 * sender's real timer fires. A FakeClock whose now() is Date.now() keeps createTestRelay's types;
 * nothing in those tests advances it.
 */
export class SystemClock extends FakeClock {
  override now(): number {
    return Date.now();
  }
}

export type CountingReceiver = Receiver & {
  /** Requests held open right now, and the most at once. */
  open(): number;
  maxOpen(): number;
  /** webhook-id → Date.now() at arrival (the first arrival of each). */
  arrivals: Map<string, number>;
  /** Changes how the receiver answers from now on (the counting stays). */
  setAnswer(answer: Answer): void;
};

/** A loopback receiver that counts what it holds open; closed by `cleanup` after the test. */
export async function countingReceiver(
  cleanup: (fn: () => Promise<void>) => void,
  answer: Answer = ok,
): Promise<CountingReceiver> {
  let open = 0;
  let maxOpen = 0;
  let current = answer;
  const arrivals = new Map<string, number>();
  const r = await startReceiver((req: Received, res: http.ServerResponse) => {
    const id = req.headers["webhook-id"]!;
    if (!arrivals.has(id)) arrivals.set(id, Date.now());
    open += 1;
    maxOpen = Math.max(maxOpen, open);
    res.on("close", () => (open -= 1));
    current(req, res);
  });
  cleanup(() => r.close());
  return Object.assign(r, {
    open: () => open,
    maxOpen: () => maxOpen,
    arrivals,
    setAnswer: (a: Answer) => {
      current = a;
    },
  });
}

/** What the poller does when it reads a task as succeeded: transition, event in the same transaction, nudge. */
export function succeed(t: TestRelay, id: string): EventRow {
  const now = t.clock.now();
  transitionTask(
    t.database.db,
    taskRow(t, id),
    {
      status: "succeeded",
      phase: "done",
      completedAt: now,
      updatedAt: now,
      nextRunAt: null,
      outputJson: JSON.stringify({ images: [{ url: "https://cdn.test/x.png" }] }),
    },
    { now, firstAttemptDelayMs: 0 },
  );
  t.relay.deps.nudges.dispatcher();
  return lastEventOfTask(t.database.db, id)!;
}

/** Creates `count` tasks for the client, makes them succeed and returns their (pending) events. */
export async function succeededTasks(
  t: TestRelay,
  apiKey: string,
  callbackUrl: string,
  count: number,
): Promise<EventRow[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) ids.push(await createTask(t, apiKey, { callback_url: callbackUrl }));
  return ids.map((id) => succeed(t, id));
}

/** Waits (real time) for a condition that real I/O will make true. */
export async function waitFor(what: string, check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function startDispatcherLoop(t: TestRelay): void {
  t.relay.loops.find((l) => l.name === "dispatcher")!.start();
}

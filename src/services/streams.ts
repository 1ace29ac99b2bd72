import type { StreamHub, Subscription } from "../core/stream-hub.js";
import { realTimers, type WaitTimers } from "../core/task-waiters.js";
import { iso } from "../core/task-view.js";
import type { EventRow, TaskRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { WATCH_PLACES } from "../store/watch-places.js";
import { progressOf, requireClientTask } from "./tasks.js";

/** Streams one API key may hold open at once (docs/contract.md, "Live progress"). */
export const STREAMS_PER_CLIENT = 50;
/** task.progress at most this often per stream. */
export const PROGRESS_EVERY_MS = 5_000;
/** Feed events read per page while an events stream catches up. */
const FEED_PAGE = 100;

/** One server-sent event: `id:` only for stored events, so Last-Event-ID always names one. */
export interface SseMessage {
  id?: string;
  event: string;
  data: string;
}
export type Send = (message: SseMessage) => Promise<void>;

type Deps = Pick<ServiceDeps, "store" | "clock" | "config">;

/** The count of open streams in the store (RateLimitStore), shared by every instance. */
const OPEN_STREAM = WATCH_PLACES.stream;
/**
 * How long an open stream's place counts without a heartbeat: its instance renews it every
 * STREAM_RENEW_MS while the stream is open, so a place held by an instance that died (kill -9)
 * stops counting after this.
 */
export const STREAM_PLACE_MS = 60_000;
export const STREAM_RENEW_MS = 20_000;

const tooManyStreams = (perClient: number) =>
  new ApiError(
    "rate_limit",
    `This API key already holds ${perClient} open event streams; close one, or read GET /openapi/v1/events.`,
    undefined,
    { "Retry-After": "5" },
  );

/**
 * A stream slot of the client, or 429 rate_limit when it holds as many as it may (503 while
 * stopping): in this process's registry, and counted in the store so that the bound holds across
 * every instance sharing it (docs/contract.md, "Live progress"). The place is renewed while the
 * stream is open and given back on release.
 */
export async function openStream(
  deps: Pick<ServiceDeps, "store" | "clock">,
  hub: StreamHub,
  clientId: string,
  timers: WaitTimers = realTimers,
): Promise<Subscription> {
  const sub = hub.subscribe(clientId);
  if (!sub) {
    if (hub.isStopping)
      throw new ApiError("service_unavailable", "The relay is shutting down; reconnect in a moment.", undefined, {
        "Retry-After": "1",
      });
    throw tooManyStreams(hub.perClient);
  }
  let held = deps.clock.now();
  const place = await deps.store.limits.take(clientId, OPEN_STREAM, held, hub.perClient, STREAM_PLACE_MS);
  if (!place.allowed) {
    await sub.release();
    throw tooManyStreams(hub.perClient);
  }
  // The heartbeat: one renewal at a time, and the last one settled before the place is given back.
  let renewing: Promise<void> = Promise.resolve();
  let timer: unknown;
  let open = true;
  const arm = () => {
    if (!open) return;
    timer = timers.set(() => {
      const now = deps.clock.now();
      renewing = deps.store.limits.renew(clientId, OPEN_STREAM, held, now).then(
        () => {
          held = now;
        },
        () => {},
      );
      void renewing.then(arm);
    }, STREAM_RENEW_MS);
  };
  arm();
  sub.onRelease = async () => {
    open = false;
    timers.clear(timer);
    timer = undefined;
    await renewing;
    await deps.store.limits.give(clientId, OPEN_STREAM, held).catch(() => {});
  };
  return sub;
}

const badLastEventId = () =>
  new ApiError("invalid_request", "Last-Event-ID is not the id of an event of this stream.", [
    { field: "Last-Event-ID", message: "unknown event id" },
  ]);

/** The task's own events (its callback's rows: an endpoint's rows repeat them) after a sequence. */
async function taskEventsAfter(deps: Deps, taskId: string, afterSeq: number): Promise<EventRow[]> {
  return (await deps.store.events.ofTask(taskId)).filter((e) => e.endpointId === null && e.sequence > afterSeq);
}

/**
 * Where a task stream starts: after the event `lastEventId` names (a reconnect), else at the start.
 * Checked before the stream opens, so an unknown task is a 404 and a foreign event id a 400.
 */
export async function taskStreamStart(
  deps: Deps,
  clientId: string,
  taskId: string,
  lastEventId: string | undefined,
): Promise<number> {
  await requireClientTask(deps, clientId, taskId);
  if (!lastEventId) return 0;
  const event = await deps.store.events.find(lastEventId);
  if (!event || event.taskId !== taskId || event.clientId !== clientId) throw badLastEventId();
  return event.sequence;
}

const message = (e: EventRow): SseMessage => ({ id: e.id, event: e.type, data: e.payload });

/**
 * A task's events as they are recorded, then the end after its terminal one (docs/contract.md,
 * "Live progress"). Each round reads the task and its events once, and only when woken: by the
 * task's own transition, or (for its queue position) a transition of its account's, at most every
 * PROGRESS_EVERY_MS. Returns when the task has ended and every event is sent, or the stream closed.
 */
export async function followTask(
  deps: Deps,
  sub: Subscription,
  clientId: string,
  taskId: string,
  afterSeq: number,
  send: Send,
  timers: WaitTimers = realTimers,
): Promise<void> {
  sub.watch({ task: taskId });
  let seen = afterSeq;
  let lastProgress = "";
  let progressAt = Number.NEGATIVE_INFINITY;
  let progressDue = false;
  let progressTimer: unknown;
  const due = () => progressDue || deps.clock.now() - progressAt >= PROGRESS_EVERY_MS;
  // A change seen before its 5 s are up is reported when they are: the timer only wakes the stream.
  const later = () => {
    if (progressTimer !== undefined) return;
    progressTimer = timers.set(
      () => {
        progressTimer = undefined;
        progressDue = true;
        sub.signal("account");
      },
      Math.max(0, progressAt + PROGRESS_EVERY_MS - deps.clock.now()),
    );
  };
  let readEvents = true;
  try {
    for (;;) {
      const task = await deps.store.tasks.findOfClient(clientId, taskId);
      if (!task) return;
      if (readEvents)
        for (const e of await taskEventsAfter(deps, taskId, seen)) {
          await send(message(e));
          seen = e.sequence;
        }
      if (task.phase === "done") return;
      // A waiting task's place moves with its account's submissions.
      if (task.phase === "waiting") sub.watch({ account: task.upstreamAccount });
      if (due()) {
        progressAt = deps.clock.now();
        progressDue = false;
        const data = await progressData(deps, task);
        if (data.key !== lastProgress) await send({ event: "task.progress", data: data.json });
        lastProgress = data.key;
      } else later();
      // Waits for the task's own change, or for a change of its account once progress may be sent:
      // another task's submission moves only the queue position, no event of this one.
      for (;;) {
        const wake = await sub.next();
        if (wake.closed) return;
        readEvents = !(wake.reasons.size === 1 && wake.reasons.has("account"));
        if (readEvents || due()) break;
        later();
      }
    }
  } finally {
    if (progressTimer !== undefined) timers.clear(progressTimer);
  }
}

/** A task.progress body, shaped as a webhook's, and the part of it that says whether anything moved. */
async function progressData(deps: Deps, task: TaskRow): Promise<{ json: string; key: string }> {
  const { queuePosition, estimatedCompletionAt } = await progressOf(deps, task);
  const data = {
    id: task.id,
    status: task.status,
    queue_position: queuePosition,
    estimated_completion_at: iso(estimatedCompletionAt),
  };
  return {
    json: JSON.stringify({ type: "task.progress", timestamp: iso(deps.clock.now()), data }),
    key: JSON.stringify(data),
  };
}

/**
 * Where an events stream starts: after `lastEventId` (a reconnect: the event's feed position),
 * else after the feed cursor `after` (GET /openapi/v1/events's cursor semantics), else at the feed's
 * end (only what happens from now on).
 */
export async function eventStreamStart(
  deps: Deps,
  clientId: string,
  lastEventId: string | undefined,
  cursorPosition: (after: string) => Promise<number>,
  after: string | undefined,
): Promise<number> {
  if (lastEventId) {
    const event = await deps.store.events.find(lastEventId);
    if (!event || event.clientId !== clientId || event.endpointId !== null || event.clientSeq <= 0)
      throw badLastEventId();
    return event.clientSeq;
  }
  if (after !== undefined) return cursorPosition(after);
  return lastPosition(deps, clientId);
}

/** The client's newest feed position (the feed's reader places any event not yet placed). */
async function lastPosition(deps: Deps, clientId: string): Promise<number> {
  let pos = 0;
  for (;;) {
    const page = await deps.store.events.feed(clientId, pos, FEED_PAGE);
    if (page.length === 0) return pos;
    pos = page[page.length - 1]!.clientSeq;
    if (page.length < FEED_PAGE) return pos;
  }
}

/** Every event of the client after a feed position, as it is recorded, until the stream closes. */
export async function followClient(
  deps: Deps,
  sub: Subscription,
  clientId: string,
  afterPos: number,
  send: Send,
): Promise<void> {
  sub.watch({ client: clientId });
  let pos = afterPos;
  for (;;) {
    for (;;) {
      const page = await deps.store.events.feed(clientId, pos, FEED_PAGE);
      for (const e of page) {
        await send(message(e));
        pos = e.clientSeq;
      }
      if (page.length < FEED_PAGE) break;
    }
    if ((await sub.next()).closed) return;
  }
}

/** The task a stream reads, checked once before the stream opens. */
export async function streamTask(deps: Deps, clientId: string, taskId: string): Promise<TaskRow> {
  return requireClientTask(deps, clientId, taskId);
}

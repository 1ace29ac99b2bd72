import type { Hold, TaskWaiters } from "../core/task-waiters.js";
import type { TaskStatus } from "../statuses.js";
import type { TaskRow } from "../store/rows.js";
import type { ServiceDeps } from "./deps.js";
import { ApiError } from "./errors.js";
import { WATCH_PLACES } from "../store/watch-places.js";
import { requireClientTask } from "./tasks.js";

export const MAX_WAIT_SECONDS = 60;

/**
 * The `wait` preference of a Prefer header (RFC 7240) in seconds, or null. A longer wait than 60 s
 * is honoured as 60 (what Preference-Applied then says), so a caller asking 999 learns the cap from
 * the answer rather than getting no wait without a word; a value that is no wait at all (0, a
 * fraction, a word) is ignored, as RFC 7240 asks: the request answers at once, without Preference-Applied.
 */
export function waitPreference(header: string | undefined): number | null {
  if (!header) return null;
  for (const preference of header.split(",")) {
    const [token = "", ...rest] = (preference.split(";")[0] ?? "").split("=");
    if (token.trim().toLowerCase() !== "wait") continue;
    const value = rest
      .join("=")
      .trim()
      .replace(/^"(.*)"$/, "$1");
    if (!/^\d{1,9}$/.test(value)) return null;
    const seconds = Number(value);
    return seconds >= 1 ? Math.min(seconds, MAX_WAIT_SECONDS) : null;
  }
  return null;
}

/** The count of held waits in the store (RateLimitStore), shared by every instance. */
const HELD_WAIT = WATCH_PLACES.hold;

/**
 * How long a held wait's place counts at most: the longest wait and a margin. A place is given back
 * when its request answers; one whose instance died holding it (kill -9) stops counting after this.
 */
export const HELD_PLACE_MS = (MAX_WAIT_SECONDS + 10) * 1000;

const tooMany = (perClient: number) =>
  new ApiError(
    "rate_limit",
    `This API key already holds ${perClient} requests waiting with Prefer: wait; retry once one has answered, or poll without it.`,
    undefined,
    { "Retry-After": "1" },
  );

/**
 * A client's hold of `seconds`, or 429 rate_limit when it already holds as many as it may: counted
 * in the store, so the bound holds across every instance sharing it (docs/contract.md, "Waiting for the result"), and
 * in this process's registry, which wakes it. Releasing the hold gives its place back.
 */
export async function holdFor(
  deps: Pick<ServiceDeps, "store" | "clock">,
  waiters: TaskWaiters,
  clientId: string,
  seconds: number,
): Promise<Hold> {
  const at = deps.clock.now();
  const place = await deps.store.limits.take(clientId, HELD_WAIT, at, waiters.perClient, HELD_PLACE_MS);
  if (!place.allowed) throw tooMany(waiters.perClient);
  const giveBack = () => deps.store.limits.give(clientId, HELD_WAIT, at);
  const hold = waiters.hold(clientId, seconds * 1000);
  if (!hold) {
    await giveBack();
    throw tooMany(waiters.perClient);
  }
  // A place not given back (the store failing now) stops counting after HELD_PLACE_MS anyway.
  hold.onRelease = () => giveBack().catch(() => {});
  return hold;
}

export const hasEnded = (task: TaskRow) => task.phase === "done";

/**
 * Reads the client's task until `done` says so, its transition waking each read, or the hold's time
 * is up: the task as it is then. The hold watches the task before the first read, so a transition
 * between a read and the wait is never missed. The hold is released in every case, and at once when
 * `signal` aborts (the caller closed its connection), so a client that gives up keeps no slot.
 */
export async function waitForTask(
  deps: Pick<ServiceDeps, "store">,
  hold: Hold,
  clientId: string,
  taskId: string,
  done: (task: TaskRow) => boolean,
  signal?: AbortSignal,
): Promise<TaskRow> {
  const gone = () => hold.expire();
  if (signal?.aborted) hold.expire();
  signal?.addEventListener("abort", gone, { once: true });
  try {
    hold.watch(taskId);
    for (;;) {
      const task = await requireClientTask(deps, clientId, taskId);
      if (hold.expired || done(task)) return task;
      await hold.next();
    }
  } finally {
    signal?.removeEventListener("abort", gone);
    await hold.release();
  }
}

/** For a read with `?status=`: its status differs from the one the caller saw, or it ended. */
export const changedFrom =
  (seen: TaskStatus | undefined) =>
  (task: TaskRow): boolean =>
    hasEnded(task) || (seen !== undefined && task.status !== seen);

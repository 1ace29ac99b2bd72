import { createHash, randomBytes } from "node:crypto";
import type { TaskListQuery } from "../store/store.js";
import type { AttemptRow, ClientRow, EventRow, HourlyCount, SessionRow, TaskRow } from "../store/rows.js";
import { authenticate } from "./clients.js";
import type { ServiceDeps } from "./deps.js";
import { deliverySummary, type DeliverySummary } from "../core/task-view.js";
import { requireClientTask } from "./tasks.js";

/** A session ends 12 h after sign-in at the latest, or after 2 h without a request. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
export const SESSION_IDLE_MS = 2 * 60 * 60 * 1000;
/** last_seen_at is rewritten at most this often: a write per page view would be wasted I/O. */
const TOUCH_EVERY_MS = 60 * 1000;

const hashToken = (token: string) => createHash("sha256").update(token, "utf8").digest("hex");

export interface SignedIn {
  /** The cookie value; only its SHA-256 is stored. */
  token: string;
  session: SessionRow;
  client: ClientRow;
}

/** Checks the API key (constant-time, via authenticate) and opens a session; null for a bad key. */
export async function signIn(deps: ServiceDeps, apiKey: string): Promise<SignedIn | null> {
  const client = await authenticate(deps, apiKey);
  if (!client) return null;
  const now = deps.clock.now();
  const token = randomBytes(32).toString("base64url");
  const session: SessionRow = {
    tokenHash: hashToken(token),
    clientId: client.id,
    csrfToken: randomBytes(32).toString("base64url"),
    createdAt: now,
    lastSeenAt: now,
    expiresAt: now + SESSION_TTL_MS,
    revokedAt: null,
  };
  await deps.store.sessions.open(session, now);
  return { token, session, client };
}

/**
 * The live session behind a cookie token, with its client; null when unknown, signed out,
 * expired, idle too long, or when the client was revoked (checked on every request, so revoking
 * a client ends its dashboard sessions at once).
 */
export async function resolveSession(
  deps: ServiceDeps,
  token: string,
): Promise<{ session: SessionRow; client: ClientRow } | null> {
  if (token.length === 0 || token.length > 100) return null;
  const tokenHash = hashToken(token);
  const session = await deps.store.sessions.find(tokenHash);
  const now = deps.clock.now();
  if (!session || session.revokedAt !== null || session.expiresAt <= now || now - session.lastSeenAt >= SESSION_IDLE_MS)
    return null;
  const client = await deps.store.clients.find(session.clientId);
  if (!client || client.revokedAt !== null) return null;
  if (now - session.lastSeenAt >= TOUCH_EVERY_MS) await deps.store.sessions.touch(tokenHash, now);
  return { session, client };
}

export async function signOut(deps: ServiceDeps, token: string): Promise<void> {
  await deps.store.sessions.revoke(hashToken(token), deps.clock.now());
}

export interface TaskListItem {
  task: TaskRow;
  delivery: DeliverySummary;
}

export async function listDashboardTasks(
  deps: ServiceDeps,
  q: TaskListQuery,
): Promise<{ items: TaskListItem[]; nextBefore: string | null }> {
  // One extra row tells whether an older page exists. The list shows no output: none is read.
  const rows = await deps.store.tasks.list({ ...q, limit: q.limit + 1, outputMaxBytes: 0 });
  const page = rows.slice(0, q.limit);
  const last = await deps.store.events.lastOfTasks(page.map((t) => t.id));
  return {
    items: page.map((task) => ({ task, delivery: deliverySummary(task, last.get(task.id)) })),
    nextBefore: rows.length > q.limit ? page[page.length - 1]!.id : null,
  };
}

export type TimelineEntry =
  | { kind: "created"; at: number }
  | { kind: "event"; at: number; event: EventRow }
  | { kind: "attempt"; at: number; attempt: AttemptRow };

export interface TaskDetail {
  task: TaskRow;
  delivery: DeliverySummary;
  events: EventRow[];
  timeline: TimelineEntry[];
}

/** A client's task with its events and attempts merged into one timeline, oldest first. */
export async function dashboardTask(deps: ServiceDeps, clientId: string, id: string): Promise<TaskDetail> {
  const task = await requireClientTask(deps, clientId, id);
  const [events, attempts] = await Promise.all([
    deps.store.events.ofTask(task.id),
    deps.store.events.attemptsOfTask(task.id),
  ]);
  const timeline: TimelineEntry[] = [
    { kind: "created", at: task.createdAt },
    ...events.map((event) => ({ kind: "event" as const, at: event.createdAt, event })),
    ...attempts.map((attempt) => ({ kind: "attempt" as const, at: attempt.attemptedAt, attempt })),
  ];
  // Stable sort: at equal times an event stays before the attempts that sent it.
  timeline.sort((a, b) => a.at - b.at);
  // The summary is the task's own callback's (an endpoint's rows share its events' sequences).
  const own = events.filter((e) => e.endpointId === null);
  return { task, delivery: deliverySummary(task, own[own.length - 1]), events, timeline };
}

export const HOUR_MS = 60 * 60 * 1000;

/** Tasks created in each of the last 24 hours (the current one included), by status. */
export async function hourlyTasks(
  deps: ServiceDeps,
  clientId: string,
): Promise<{ hours: number[]; counts: HourlyCount[] }> {
  const currentHour = Math.floor(deps.clock.now() / HOUR_MS) * HOUR_MS;
  const first = currentHour - 23 * HOUR_MS;
  const hours = Array.from({ length: 24 }, (_, i) => first + i * HOUR_MS);
  return { hours, counts: await deps.store.tasks.hourlyCounts(clientId, first) };
}

export function callbackUrls(deps: ServiceDeps, clientId: string): Promise<string[]> {
  return deps.store.tasks.recentCallbackUrls(clientId);
}

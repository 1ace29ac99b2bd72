import type { SweepResult } from "../core/poll-plan.js";
import type { TaskStatus } from "../statuses.js";
import type { UpstreamClient } from "../upstream/client.js";
import type { UpstreamTask } from "../upstream/types.js";
import type { InFlightTask } from "../store/store.js";
import { storedContext } from "../telemetry/index.js";
import type { TraceContext } from "../telemetry/trace-context.js";

export const LIST_PAGE_LIMIT = 100;

/** The one upstream call sweeps make. */
export type ListClient = Pick<UpstreamClient, "listTasks">;

/**
 * A list client whose reads link the trace of each of these tasks they report (a list read is made
 * for many tasks at once, so it continues none of their traces: it links them).
 */
export function linkingTasks(client: ListClient, tasks: readonly InFlightTask[]): ListClient {
  let byUpstreamId: Map<string, TraceContext> | null = null;
  const traceOf = (upstreamId: string) => {
    byUpstreamId ??= new Map(
      tasks.flatMap((t) => {
        const trace = storedContext(t);
        return t.upstreamTaskId && trace ? [[t.upstreamTaskId, trace] as const] : [];
      }),
    );
    return byUpstreamId.get(upstreamId) ?? null;
  };
  return { listTasks: (params) => client.listTasks(params, traceOf) };
}

/**
 * Told of each page's items as soon as it is read (with their status), before the next read: what
 * a page settles is recorded while the sweep reads on, not after its last page.
 */
export type OnPage = (items: UpstreamTask[]) => void;

export interface SweepPlan {
  /** Read the queued list too (only needed while some task is still known queued). */
  includeQueued: boolean;
  maxReads: number;
}

/**
 * Learns the state of many tasks from the list endpoint, a page of up to 100 tasks per read.
 * The active lists come first (queued before processing, so a task moving between them is seen in
 * one of the two); a task of ours absent from both has ended. The terminal lists are then read
 * for those, so their output arrives without a single read each.
 */
export async function sweepActive(
  client: ListClient,
  plan: SweepPlan,
  take: () => Promise<boolean>,
  onPage: OnPage = () => {},
): Promise<SweepResult> {
  const result: SweepResult = { seen: new Map(), reads: 0, complete: true, unsupported: false };
  const statuses: TaskStatus[] = plan.includeQueued ? ["queued", "processing"] : ["processing"];
  for (const status of statuses) {
    const done = await readPages(client, status, plan.maxReads, take, result, () => false, onPage);
    if (!done) result.complete = false;
    if (result.unsupported) return result;
  }
  return result;
}

export async function harvestTerminal(
  client: ListClient,
  candidates: ReadonlySet<string>,
  maxReads: number,
  take: () => Promise<boolean>,
  result: SweepResult,
  onPage: OnPage = () => {},
): Promise<void> {
  const allFound = () => [...candidates].every((id) => result.seen.has(id));
  const cap = result.reads + maxReads;
  for (const status of ["succeeded", "failed"] as const) {
    if (allFound()) return;
    await readPages(client, status, cap, take, result, allFound, onPage);
    if (result.unsupported) return;
  }
}

/**
 * A probe: one page of the unfiltered list, one read, from `cursor` (the page where the last full
 * sweep found the oldest task in flight: ListState.tailCursor) or the first. Stands in for a full
 * sweep while nothing ends (poll-plan.ts, PROBE_READS): what it shows changed brings the full sweep.
 */
export async function probeList(
  client: ListClient,
  cursor: string | null,
  take: () => Promise<boolean>,
  onPage: OnPage,
): Promise<SweepResult> {
  const result: SweepResult = { seen: new Map(), reads: 0, complete: false, unsupported: false };
  await readPages(
    client,
    undefined,
    1,
    take,
    result,
    () => true,
    onPage,
    () => {},
    cursor ?? undefined,
  );
  return result;
}

/**
 * One pass over the unfiltered list (every status, with output where ended) until every task in
 * `wanted` has been seen, the end of the list, or the read cap. When the upstream lists newest
 * first, this costs the pages down to the oldest task in flight, whatever ended meanwhile: cheaper
 * than the active lists plus the terminal lists whenever tasks are finishing. `complete` says
 * whether every wanted task was seen; an item without a status tells nothing.
 */
export async function sweepAll(
  client: ListClient,
  wanted: Set<string>,
  maxReads: number,
  take: () => Promise<boolean>,
  onPage: OnPage = () => {},
): Promise<SweepResult> {
  const result: SweepResult = { seen: new Map(), reads: 0, complete: false, unsupported: false };
  let missing = wanted.size;
  const enough = () => missing === 0;
  result.tailCursor = null;
  await readPages(client, undefined, maxReads, take, result, enough, onPage, (id) => {
    if (wanted.has(id)) missing -= 1;
  });
  result.complete = missing === 0;
  return result;
}

/**
 * Reads pages of one status (all statuses when undefined) until the end, the read cap, or
 * `enough()`. Returns whether the end was reached.
 */
async function readPages(
  client: ListClient,
  status: TaskStatus | undefined,
  maxReads: number,
  take: () => Promise<boolean>,
  result: SweepResult,
  enough: () => boolean,
  onPage: OnPage,
  onNew: (id: string) => void = () => {},
  from?: string,
): Promise<boolean> {
  let cursor: string | undefined = from;
  for (;;) {
    if (result.reads >= maxReads || !(await take())) return false;
    result.reads += 1;
    if (result.tailCursor !== undefined) result.tailCursor = cursor ?? null;
    const page = await client.listTasks({
      ...(status ? { status } : {}),
      limit: LIST_PAGE_LIMIT,
      ...(cursor ? { cursor } : {}),
    });
    if (page === null) {
      result.unsupported = true;
      return false;
    }
    const items: UpstreamTask[] = [];
    for (const task of page.tasks) {
      // An item without a status is read as having the filter's status (unfiltered: unknown).
      const item = task.status === null && status ? { ...task, status } : task;
      if (item.status === null) continue;
      if (!result.seen.has(task.id)) onNew(task.id);
      result.seen.set(task.id, item);
      items.push(item);
    }
    onPage(items);
    // No cursor this reader knows counts as the end: a task of ours beyond it then looks ended and
    // gets a single read, which costs reads but never loses a task.
    if (!page.nextCursor || page.tasks.length === 0) return true;
    if (enough()) return false;
    cursor = page.nextCursor;
  }
}

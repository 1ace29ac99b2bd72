import { LRUCache } from "lru-cache";
import type { TaskStore } from "../../store/store.js";

/** The claim side of the TaskStore, one file of its own on each driver (db/sqlite/task-claims.ts, db/pg/task-claims.ts). */
export type TaskClaimOperations = Pick<
  TaskStore,
  | "claimFairly"
  | "claimDue"
  | "claimIds"
  | "claimExpired"
  | "claimAcrossClients"
  | "nextDueAt"
  | "nextExpiryAt"
  | "accountsWithDue"
  | "accountsInFlight"
  | "countRunning"
  | "listInFlight"
>;

/**
 * How many of a client's due tasks a fair claim (TaskStore.claimFairly) may read and take: the
 * claim's limit, bounded by the client's running cap less what it has running (none with no cap).
 */
export function clientRoom(maxRunning: number | null, running: number, limit: number): number {
  return maxRunning === null ? limit : Math.min(limit, maxRunning - running);
}

/**
 * The granularity of a client's `last_admitted_at` (ClientStore.markAdmitted): it is written when it
 * is older than this, not for every admission, so a client's admissions do not each write its row.
 * Fair claims order clients by it (least recently admitted first), so admissions within one such
 * span count as one: the order between two clients admitted within it may be stale by this much.
 */
export const ADMITTED_GRANULARITY_MS = 1_000;

/**
 * ClientStore.markAdmitted's memo, one per store: whether an admission at `at` must be written, by
 * what this process last wrote (or found no need to) for the client. Within ADMITTED_GRANULARITY_MS
 * of it the process does not even ask; the statement's own condition holds across processes.
 */
export function admissionMarks(): (clientId: string, at: number) => boolean {
  const admitted = new LRUCache<string, number>({ max: 10_000 });
  return (clientId, at) => {
    const last = admitted.get(clientId);
    if (last !== undefined && at >= last && at - last < ADMITTED_GRANULARITY_MS) return false;
    admitted.set(clientId, at);
    return true;
  };
}

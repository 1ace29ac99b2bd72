import type { TaskStatus } from "../statuses.js";

/**
 * Shapes the upstream client hands to the rest of the relay. They live apart from
 * client.ts so the pure parser and the error class can share them without a cycle.
 */

export type TaskType = "image" | "video";

export interface UpstreamUsage {
  pointsCharged: number | null;
  pointsRefunded: number | null;
}

export interface UpstreamErrorInfo {
  code: string;
  message: string;
  request_id: string | null;
}

export interface UpstreamTask {
  id: string;
  /** null when the upstream sent a status we do not know: the caller treats it as "no change". */
  status: TaskStatus | null;
  /** Verbatim: the reference does not show its keys. null when absent. */
  output: unknown;
  usage: UpstreamUsage;
  error: UpstreamErrorInfo | null;
  /** The whole parsed body (or list item) the task was read from. */
  raw: unknown;
}

export interface CreateResult {
  task: UpstreamTask;
  replayed: boolean;
  httpStatus: number;
  requestId: string | null;
}

export interface TaskPage {
  tasks: UpstreamTask[];
  nextCursor: string | null;
}

import { settles } from "../../core/poll-plan.js";
import type { InFlightTask } from "../../store/store.js";
import type { TaskRow } from "../../store/rows.js";
import type { UpstreamTask } from "../../upstream/types.js";

/**
 * The tasks a sweep's pages settled (ended, with output and charge: settles()), recorded as each
 * page is read, while the sweep reads its next page: a task that ended is written (and its webhook
 * due) one page read after it was seen, not after the sweep's last page and every record before it.
 */
export class EarlyRecords {
  private readonly byUpstream = new Map<string, InFlightTask>();
  private readonly taken = new Set<string>();
  private readonly pending: Promise<void>[] = [];
  private failure: { err: unknown } | null = null;

  constructor(
    /** Claims the tasks and records what the sweep saw of each (Poller.record, for one account). */
    private readonly record: (ids: string[], seen: (row: TaskRow) => UpstreamTask, now: number) => Promise<void>,
    private readonly now: () => number,
    inFlight: readonly InFlightTask[],
  ) {
    for (const t of inFlight) if (t.upstreamTaskId) this.byUpstream.set(t.upstreamTaskId, t);
  }

  /** Whether the relay task was recorded here (the sweep's outcome then leaves it out). */
  has(taskId: string): boolean {
    return this.taken.has(taskId);
  }

  page(items: UpstreamTask[]): void {
    const seen = new Map<string, UpstreamTask>();
    for (const item of items) {
      const task = this.byUpstream.get(item.id);
      if (!task || this.taken.has(task.id) || !settles(item)) continue;
      this.taken.add(task.id);
      seen.set(task.id, item);
    }
    if (seen.size === 0) return;
    this.pending.push(
      this.record([...seen.keys()], (row) => seen.get(row.id)!, this.now()).catch((err: unknown) => {
        this.failure ??= { err };
      }),
    );
  }

  /** Resolves once every early record is written; rejects with the first failure. */
  async settled(): Promise<void> {
    await Promise.all(this.pending);
    if (this.failure) throw this.failure.err;
  }
}

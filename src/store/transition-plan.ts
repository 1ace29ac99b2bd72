import type { CreditChange, TransitionOptions, TransitionRules } from "./store.js";
import type { NewEventRow, NewTaskRow, TaskRow } from "./rows.js";
import { wellFormed } from "./values.js";

/**
 * Everything one task change writes, decided before anything is written: the drivers only apply
 * it, in one transaction, in this order (task row, books, woken tasks, learned price, outbox event).
 */
export interface TransitionPlan {
  /** What the task row gets, the new event's sequence included (empty: the row stays as it is). */
  patch: Partial<NewTaskRow>;
  /** The row after the change: what the transition returns. */
  after: TaskRow;
  /** The change to the client's books, or null when there is none. */
  credit: CreditChange | null;
  /** A first charge of a price key teaches its price. */
  learn: { priceKey: string; points: number } | null;
  /** Credits came back: the client's waiting tasks held back for room are due again now. */
  wake: boolean;
  /** The outbox event (its feed position is taken by the driver when it writes it), or null. */
  event: Omit<NewEventRow, "clientSeq"> | null;
}

/** Plans a change of `before` (read inside the transaction that will apply it) by the rules. */
export function planTransition(
  rules: TransitionRules,
  before: TaskRow,
  patch: Partial<NewTaskRow>,
  opts: TransitionOptions,
  /** The event types the client's endpoints subscribe to (see TransitionRules.eventFor). */
  endpointEvents: readonly string[] = [],
): TransitionPlan {
  const prepared = rules.prepare(before, patch);
  // Undefined leaves a column as it is (as an UPDATE's SET would). Text is stored well-formed (a
  // lone surrogate as U+FFFD, on both drivers), so the planned row is the stored row.
  const set = Object.fromEntries(
    Object.entries(prepared)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, typeof v === "string" ? wellFormed(v) : v]),
  ) as Partial<NewTaskRow>;
  const changed = { ...before, ...set } as TaskRow;
  const { change, learn, wake } = rules.settle(before, changed);
  const event = rules.eventFor(
    before,
    changed,
    opts.now,
    opts.firstAttemptDelayMs,
    opts.expectedDurationMs ?? null,
    endpointEvents,
  );
  const credit = change.charged !== 0 || change.refunded !== 0 || change.reserved !== 0 ? change : null;
  if (!event) return { patch: set, after: changed, credit, learn, wake, event: null };
  return {
    patch: { ...set, eventSequence: event.sequence },
    after: { ...changed, eventSequence: event.sequence },
    credit,
    learn,
    wake,
    event,
  };
}

import type { SubmissionVerdict } from "./lifecycle.js";
import type { CreditPosition, SubmissionContext } from "../store/store.js";
import { tablePrice } from "./pricing.js";

/**
 * A client's credit limit is a budget, not a report: points charged (net of refunds) plus points
 * reserved by its waiting and in-flight tasks never exceed it. Every decision below runs inside the
 * transaction that acts on it, so a burst of concurrent creations cannot all see the same room.
 *
 * - A task whose price is known reserves it at intake (402 at once when it cannot fit) and keeps
 *   the reservation until the upstream's charge replaces it.
 * - A task whose price is unknown reserves nothing while it waits. When it is about to be submitted
 *   it takes the client's whole remaining room, so nothing else of that client starts until its
 *   charge is known (and its price learned for the next ones): one unpriced task in flight at a
 *   time, and never an optimistic guess. The only overshoot the relay cannot rule out is that first
 *   task costing more than all the room that was left, which the relay cannot know beforehand.
 * - A task that does not fit when its turn comes waits while tasks in flight still hold
 *   reservations, and otherwise ends failed with insufficient_points, never submitted, never charged.
 */

export function spent(p: CreditPosition): number {
  return p.charged - p.refunded;
}

/** What the task will cost: learned from earlier charges for its price key, else the published tables. */
export function priceOf(
  learned: number | null,
  type: "image" | "video",
  requestBody: () => Record<string, unknown>,
): number | null {
  return learned ?? tablePrice(type, requestBody());
}

function describe(p: CreditPosition): string {
  return `${spent(p)} charged and ${p.reserved} reserved of a limit of ${p.limit}`;
}

/**
 * Intake's check, in the creation's transaction: the reservation to hold (the price when the client
 * has a limit and the price is known), or why the task cannot fit (the service answers 402 with it).
 */
export function intakeReservation(
  p: CreditPosition | undefined,
  price: number | null,
): { reserve: number } | { refuse: string } {
  if (!p || p.limit === null) return { reserve: 0 };
  const fits = price !== null ? spent(p) + p.reserved + price <= p.limit : spent(p) < p.limit;
  if (fits) return { reserve: price ?? 0 };
  return {
    refuse:
      price !== null
        ? `This task costs ${price} points and does not fit your credit limit on this relay (${describe(p)}).`
        : `Your credit limit on this relay is used up (${describe(p)}).`,
  };
}

/** Whether a waiting task may be submitted now, in the transaction that then marks it submitting. */
export function decideSubmission(ctx: SubmissionContext): SubmissionVerdict {
  const { task, position: p, reservations: held } = ctx;
  if (!p) return { kind: "revoked" };
  // Once an attempt was made the upstream may hold the task: retrying it is not a new spend.
  if (task.submitAttempts > 0) return { kind: "go", reserve: task.pointsReserved };
  if (p.revoked) return { kind: "revoked" };
  const price = priceOf(ctx.learnedPrice, task.type, () => JSON.parse(task.requestJson) as Record<string, unknown>);
  if (p.limit === null) return { kind: "go", reserve: price ?? 0 };
  const free = p.limit - spent(p);
  if (price !== null) {
    // Older tasks go first (this one's turn is after theirs, not after newer ones'), and any
    // reservation added on top of what the task already holds must fit the total.
    const inTurn = held.inFlight + held.ahead + price <= free;
    const addsUp = price <= task.pointsReserved || held.others + price <= free;
    if (inTurn && addsUp) return { kind: "go", reserve: price };
  } else if (free - held.others > 0) {
    return { kind: "go", reserve: free - held.others };
  }
  // Room held by tasks in flight comes back (or turns into their charge) as they run: worth waiting
  // for. Room held by other waiting tasks does not, and waiting on it could wait forever.
  if (held.inFlight > 0) return { kind: "wait" };
  return {
    kind: "refuse",
    message:
      price !== null
        ? `The task costs ${price} points and does not fit the credit limit (${describe(p)}); it was never submitted.`
        : `The credit limit is used up (${describe(p)}); the task was never submitted.`,
  };
}

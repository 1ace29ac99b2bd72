import { intakeReservation } from "../core/credits.js";
import type { CreditPosition } from "../store/store.js";
import { ApiError } from "./errors.js";

/**
 * Intake's check: the reservation to hold, or 402 insufficient_points when the task cannot fit. The
 * credit policy itself is core/credits.ts, which the submitter applies too.
 */
export function reserveAtIntake(p: CreditPosition | undefined, price: number | null): number {
  const verdict = intakeReservation(p, price);
  if ("refuse" in verdict) throw new ApiError("insufficient_points", verdict.refuse);
  return verdict.reserve;
}

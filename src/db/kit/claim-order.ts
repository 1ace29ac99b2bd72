/** The orders claimed rows are handed back in, on both drivers (an UPDATE … RETURNING returns them in storage order). */

/** Claimed rows in the order they were picked (`picked`, their ids in order); rows not picked are not expected. */
export function inPickedOrder<R extends { id: string }>(claimed: R[], picked: readonly string[]): R[] {
  const order = new Map(picked.map((id, i) => [id, i]));
  return claimed.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
}

/** Claimed events in the order they go out: due time, then seq. Sorts in place. */
export function eventsInDueOrder<R extends { nextAttemptAt: number | null; seq: number }>(rows: R[]): R[] {
  return rows.sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || a.seq - b.seq);
}

/** Claimed notices in the order they go out: due time, then id. Sorts in place. */
export function noticesInDueOrder<R extends { nextAttemptAt: number | null; id: string }>(rows: R[]): R[] {
  return rows.sort((a, b) => (a.nextAttemptAt ?? 0) - (b.nextAttemptAt ?? 0) || (a.id < b.id ? -1 : 1));
}

/**
 * A later turn of the event loop (after the I/O already waiting): for work over many bytes or rows
 * that must not hold one turn for long (issue #38 item 7: a 7 MB upstream answer read, copied or
 * stored in one go was 15-20 ms of a turn each).
 */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** How many bytes a turn reads or copies of one large body before it yields (nextTurn). */
export const BYTES_PER_TURN = 1024 * 1024;

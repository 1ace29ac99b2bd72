/**
 * A later turn of the event loop (after the I/O already waiting): for work over many bytes or rows
 * that must not hold one turn for long (issue #38 item 7: a 7 MB upstream answer read, copied or
 * stored in one go was 15-20 ms of a turn each).
 */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** How many bytes of large bodies the whole process reads or copies in one turn (TurnBytes). */
export const BYTES_PER_TURN = 1024 * 1024;

/** The slice a large body's reader or copier asks for at a time (TurnBytes.take). */
export const BYTES_PER_SLICE = 256 * 1024;

/**
 * One budget of bytes a turn shared by every large body in flight: eight 7 MB answers landing
 * together, each yielding after its own megabyte, still read or copied eight megabytes in one
 * check phase (issue #38 item 7). A slice of work waits for a turn with room for it; a turn grants
 * slices in the order they asked until BYTES_PER_TURN is taken (at least one slice a turn, however
 * large), the rest wait for the next turn.
 */
export class TurnBytes {
  private waiting: Array<{ bytes: number; go: () => void }> = [];
  private scheduled = false;

  constructor(private readonly perTurn = BYTES_PER_TURN) {}

  /** Resolves in a later turn that has room for `bytes`: the caller does that slice of work then. */
  take(bytes: number): Promise<void> {
    return new Promise((go) => {
      this.waiting.push({ bytes, go });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(this.grant);
      }
    });
  }

  private readonly grant = (): void => {
    let granted = 0;
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!;
      if (granted > 0 && granted + next.bytes > this.perTurn) break;
      this.waiting.shift();
      granted += next.bytes;
      next.go();
    }
    if (this.waiting.length > 0) setImmediate(this.grant);
    else this.scheduled = false;
  };
}

/** The process's one budget (TurnBytes): the upstream bodies' reads and the parse worker's copies share it. */
export const turnBytes = new TurnBytes();

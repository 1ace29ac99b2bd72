/** Wakes a worker loop early: a new row exists that it may act on now. */
export interface Nudges {
  submitter(): void;
  poller(): void;
  dispatcher(): void;
  /** The mirror worker (copies of outputs into clients' buckets), where one runs. */
  mirror?(): void;
  /**
   * A task was created for an upstream account (intake): the submitter is woken unless it knows the
   * account is full, which a creation cannot change (a task ending wakes it through submitter()).
   * Without it, intake nudges the submitter.
   */
  created?(account: string, expiresAt: number | null): void;
  /**
   * One of the client's endpoints was removed (its pending deliveries ended in the store): what a
   * worker holds in memory for the client's deliveries is let go, so nothing of the removed
   * endpoint is sent after its removal (the dispatcher's leased-ahead events). Without it, such
   * events could still go out until their lease's end.
   */
  endpointRemoved?(clientId: string): void;
}

export const noNudges: Nudges = { submitter() {}, poller() {}, dispatcher() {} };

/** Anything a nudge can wake (a WorkerLoop). */
export interface Wakeable {
  nudge(): void;
}

/**
 * Nudges that wake the loop of the same name, looked up by `loop` when the nudge comes: by name,
 * so the order loops are kept in cannot send a nudge to another worker, and at call time, so the
 * nudges can be handed out before the loops exist.
 */
export function nudgesByName(
  loop: (name: "submitter" | "poller" | "dispatcher" | "mirror") => Wakeable | undefined,
): Nudges {
  return {
    submitter: () => loop("submitter")?.nudge(),
    poller: () => loop("poller")?.nudge(),
    dispatcher: () => loop("dispatcher")?.nudge(),
    mirror: () => loop("mirror")?.nudge(),
  };
}

/**
 * Whether a creation wakes the submitter: not when its account is full, which a creation cannot
 * change (a task ending wakes it), unless the task has a deadline, whose expiry the submitter
 * must see. `accountFull` is asked only for a task without one.
 */
export function creationWakesSubmitter(expiresAt: number | null, accountFull: () => boolean): boolean {
  return expiresAt !== null || !accountFull();
}

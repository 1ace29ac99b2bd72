/** Wakes a worker loop early: a new row exists that it may act on now. */
export interface Nudges {
  submitter(): void;
  poller(): void;
  dispatcher(): void;
  /** The mirror worker (copies of outputs into clients' buckets), where one runs. */
  mirror?(): void;
}

export const noNudges: Nudges = { submitter() {}, poller() {}, dispatcher() {} };

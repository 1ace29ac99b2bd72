import type { Clock } from "../clock.js";
import type { Store } from "../store/store.js";
import type { NewNoticeRow, NoticeRow } from "../store/rows.js";
import { retryAt } from "./delivery.js";
import type { SendResult } from "../webhooks/sender.js";
import { ERROR_BYTES, storableText } from "./stored-text.js";

/**
 * Every state change of a notice (docs/contract.md, "Failure notices"), as verbs: delivered at a 2xx, retried on
 * WEBHOOK_RETRY_SCHEDULE (a longer Retry-After wins), failed once the schedule is spent or the
 * receiver answers 410. Each writes under the claim's lease and hands it back.
 */
export class NoticeLifecycle {
  constructor(
    private readonly deps: {
      store: Pick<Store, "notices">;
      clock: Clock;
      retryScheduleMs: number[];
      random?: () => number;
    },
  ) {}

  recordAttempt(notice: NoticeRow, result: SendResult): Promise<void> {
    const now = this.deps.clock.now();
    const attempts = notice.attempts + 1;
    const common: Partial<NewNoticeRow> = {
      attempts,
      lastStatusCode: result.statusCode,
      lastError: storableText(result.error, ERROR_BYTES),
    };
    if (result.ok)
      return this.write(notice, { ...common, deliveryStatus: "succeeded", deliveredAt: now, nextAttemptAt: null });
    const at = result.gone ? null : retryAt(result, attempts, now, this.deps.retryScheduleMs, this.deps.random);
    if (at === null) return this.write(notice, { ...common, deliveryStatus: "failed", nextAttemptAt: null });
    return this.write(notice, { ...common, nextAttemptAt: at });
  }

  /** Ends a notice without an attempt (its client is gone or revoked). */
  fail(notice: NoticeRow, reason: string): Promise<void> {
    return this.write(notice, { deliveryStatus: "failed", lastError: reason, nextAttemptAt: null });
  }

  private write(notice: NoticeRow, patch: Partial<NewNoticeRow>): Promise<void> {
    return this.deps.store.notices.record(notice.id, notice.claimToken!, patch);
  }
}

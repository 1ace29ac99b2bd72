import type { Clock } from "../clock.js";
import { newId } from "../ids.js";
import type { Store } from "../store/store.js";
import type { ClaimedEvent, EventRow, NewEventRow } from "../store/rows.js";
import { retryDelayMs } from "../webhooks/schedule.js";
import type { SendResult } from "../webhooks/sender.js";
import { ANSWER_BYTES, ERROR_BYTES, storableText } from "./stored-text.js";

/** What became of an event after one attempt: the log's outcome word and the event's new state. */
export interface AttemptOutcome {
  outcome: "delivered" | "gone" | "retry" | "exhausted" | "too_large" | "paused";
  patch: Partial<NewEventRow>;
  /** False when the attempt does not advance the event's retry schedule (a failed trial of a paused host). */
  spendsRetry?: boolean;
}

/** An attempt's record and metric word: a 2xx, refused before sending (the address guard), or anything else. */
export function attemptVerdict(result: Pick<SendResult, "ok" | "blocked">): "succeeded" | "blocked" | "failed" {
  return result.ok ? "succeeded" : result.blocked ? "blocked" : "failed";
}

/**
 * The event state machine after an attempt: delivered (2xx), stopped by the receiver (410, still
 * redeliverable by hand), retried on WEBHOOK_RETRY_SCHEDULE (a longer Retry-After wins), or
 * failed once the schedule is spent.
 */
export function attemptOutcome(
  event: ClaimedEvent,
  result: SendResult,
  now: number,
  scheduleMs: number[],
  random?: () => number,
): AttemptOutcome {
  if (result.ok)
    return { outcome: "delivered", patch: { deliveryStatus: "succeeded", deliveredAt: now, nextAttemptAt: null } };
  if (result.gone) return { outcome: "gone", patch: { deliveryStatus: "failed", failedAt: now, nextAttemptAt: null } };
  const at = retryAt(result, event.roundAttempts + 1, now, scheduleMs, random);
  if (at === null)
    return { outcome: "exhausted", patch: { deliveryStatus: "failed", failedAt: now, nextAttemptAt: null } };
  return { outcome: "retry", patch: { nextAttemptAt: at } };
}

/**
 * When a failed attempt is tried again: the schedule's delay for attempt `attemptIndex` (with its
 * jitter), or the receiver's Retry-After when longer; null once the schedule is spent. Webhooks
 * and notices retry alike.
 */
export function retryAt(
  result: SendResult,
  attemptIndex: number,
  now: number,
  scheduleMs: number[],
  random?: () => number,
): number | null {
  const scheduled = retryDelayMs(scheduleMs, attemptIndex, random);
  return scheduled === null ? null : now + Math.max(scheduled, result.retryAfterMs ?? 0);
}

/**
 * A new delivery round for an event (redeliver, recover): pending again, its retry schedule from
 * the start, due now, and no lease, so an attempt still in flight can no longer record over it.
 */
export function newRound(now: number): Partial<NewEventRow> {
  return {
    deliveryStatus: "pending",
    roundAttempts: 0,
    nextAttemptAt: now,
    failedAt: null,
    claimToken: null,
    claimedUntil: null,
  };
}

/** Redeliver: the task's last event queued again (same webhook-id and body). */
export function redeliverLast(store: Store, taskId: string, now: number): Promise<EventRow | undefined> {
  return store.events.requeueLastOfTask(taskId, newRound(now));
}

/** Redeliver to endpoints: these endpoint rows of the task's last event queued again (same webhook-id and body); how many. */
export function redeliverToEndpoints(store: Store, ids: string[], now: number): Promise<number> {
  return store.webhookEndpoints.requeueDeliveries(ids, newRound(now));
}

/** Recover: the client's failed events since a time queued again; how many. */
export function recoverFailed(store: Store, clientId: string, since: number, now: number): Promise<number> {
  return store.events.requeueFailed(clientId, since, newRound(now));
}

/**
 * Every state change of an outbox event, as verbs: each writes under the claim's lease and hands the
 * lease back (the store releases it with the write), so the dispatcher never builds one by hand.
 */
export class DeliveryLifecycle {
  constructor(
    private readonly deps: {
      store: Pick<Store, "events">;
      clock: Clock;
      retryScheduleMs: number[];
      random?: () => number;
    },
  ) {}

  /** One attempt made (or refused without sending): its row, and the event's next state, together. */
  async recordAttempt(
    event: ClaimedEvent,
    startedAt: number,
    result: SendResult,
    decided?: AttemptOutcome,
  ): Promise<AttemptOutcome> {
    const now = this.deps.clock.now();
    const next = decided ?? attemptOutcome(event, result, now, this.deps.retryScheduleMs, this.deps.random);
    await this.deps.store.events.recordAttempt(
      event.id,
      event.claimToken!,
      {
        id: newId("att", startedAt),
        eventId: event.id,
        taskId: event.taskId,
        clientId: event.clientId,
        eventType: event.type,
        url: event.callbackUrl!,
        attemptedAt: startedAt,
        statusCode: result.statusCode,
        latencyMs: Math.round(result.latencyMs),
        outcome: attemptVerdict(result),
        error: storableText(result.error, ERROR_BYTES),
        responseBody: storableText(result.responseBody, ANSWER_BYTES),
      },
      {
        attempts: event.attempts + 1,
        // A paused host's trial that fails spends no step of the schedule: the event waits for the host.
        roundAttempts: next.spendsRetry === false ? event.roundAttempts : event.roundAttempts + 1,
        lastAttemptAt: startedAt,
        lastStatusCode: result.statusCode,
        lastError: storableText(result.error, ERROR_BYTES),
        ...next.patch,
      },
    );
    return next;
  }

  /**
   * The trial of a paused host failed: the attempt is recorded, but the event keeps its place in
   * the retry schedule and waits for the host's next trial (`until`), like the host's other events.
   */
  recordPausedTrial(
    event: ClaimedEvent,
    startedAt: number,
    result: SendResult,
    until: number,
  ): Promise<AttemptOutcome> {
    return this.recordAttempt(event, startedAt, result, {
      outcome: "paused",
      patch: { nextAttemptAt: until },
      spendsRetry: false,
    });
  }

  /** An attempt refused before the wire for good (a body over the size limit would be refused every time): recorded, and the event failed. */
  refuse(event: ClaimedEvent, result: SendResult): Promise<AttemptOutcome> {
    const now = this.deps.clock.now();
    return this.recordAttempt(event, now, result, {
      outcome: "too_large",
      patch: { deliveryStatus: "failed", failedAt: now, nextAttemptAt: null },
    });
  }

  /** Ends an event without an attempt on the wire (nothing to send it to). */
  fail(event: ClaimedEvent, reason: string): Promise<void> {
    return this.deps.store.events.release(event.id, event.claimToken!, {
      deliveryStatus: "failed",
      failedAt: this.deps.clock.now(),
      lastError: reason,
    });
  }

  /** Hands a claimed event back untouched, or moved to `until` (its key's breaker trial). */
  release(event: ClaimedEvent, until: number | null): Promise<void> {
    return this.deps.store.events.release(event.id, event.claimToken!, until !== null ? { nextAttemptAt: until } : {});
  }
}

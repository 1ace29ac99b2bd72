import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import { newId } from "../ids.js";
import type { Logger } from "../logger.js";
import { findClient, type ClientRow } from "../db/clients.js";
import { claimDueEvents, insertAttempt, nextEventDueAt, updateLeasedEvent, type EventRow, type NewEventRow } from "../db/events.js";
import type { Db } from "../db/open.js";
import { activeSecrets } from "../services/clients.js";
import { retryDelayMs } from "../webhooks/schedule.js";
import type { SendResult, WebhookSender } from "../webhooks/sender.js";
import { webhookHeaders } from "../webhooks/sign.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";

export interface DispatcherOptions {
  db: Db;
  clock: Clock;
  config: Config;
  logger: Logger;
  sender: WebhookSender;
  owner: LeaseOwner;
  /** Deliveries in flight at once, across all receivers. */
  maxInFlight?: number;
  random?: () => number;
  onAttempt?: (event: EventRow, result: SendResult) => void;
}

/**
 * Delivers outbox events: claims due ones under a lease, signs and POSTs each, records the attempt,
 * and schedules the next one on WEBHOOK_RETRY_SCHEDULE. Deliveries run concurrently and the loop does
 * not wait for a slow receiver before claiming more, so one dead endpoint cannot hold up the rest.
 */
export class Dispatcher {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly maxInFlight: number;
  /** Called when a delivery finishes, so the loop can claim more (set by main). */
  onSettled: () => void = () => {};

  constructor(private readonly opts: DispatcherOptions) {
    this.maxInFlight = opts.maxInFlight ?? 64;
  }

  get activeCount(): number {
    return this.inFlight.size;
  }

  /** Claims what is due and starts delivering it; does not wait for the deliveries (production loop). */
  async tick(): Promise<TickResult> {
    const started = this.claimAndStart();
    return { didWork: started.length > 0, nextDueAt: this.nextDueAt() };
  }

  /** Claims what is due, delivers it and waits for every attempt to be recorded (tests). */
  async runOnce(): Promise<number> {
    const started = this.claimAndStart();
    await Promise.all(started);
    return started.length;
  }

  /** Waits for in-flight deliveries (graceful shutdown). */
  async drain(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }

  private nextDueAt(): number | null {
    if (this.inFlight.size >= this.maxInFlight) return null;
    return nextEventDueAt(this.opts.db);
  }

  private claimAndStart(): Promise<void>[] {
    const { db, clock, config, owner } = this.opts;
    const room = this.maxInFlight - this.inFlight.size;
    if (room <= 0) return [];
    const now = clock.now();
    const claimed = claimDueEvents(db, { now, leaseMs: config.webhookTimeoutMs + 5_000, token: owner.token(), limit: room });
    const clients = new Map<string, ClientRow | undefined>();
    return claimed.map((event) => {
      if (!clients.has(event.clientId)) clients.set(event.clientId, findClient(db, event.clientId));
      const promise = this.deliver(event, clients.get(event.clientId)).catch((err: unknown) => {
        this.opts.logger.error({ err, event_id: event.id }, "delivery bookkeeping failed");
      });
      this.inFlight.add(promise);
      void promise.finally(() => {
        this.inFlight.delete(promise);
        this.onSettled();
      });
      return promise;
    });
  }

  private async deliver(event: EventRow, client: ClientRow | undefined): Promise<void> {
    const { db, clock, config, logger, sender } = this.opts;
    const token = event.claimToken!;
    if (!client || !event.callbackUrl) {
      updateLeasedEvent(db, event.id, token, { deliveryStatus: "failed", failedAt: clock.now(), lastError: "no callback_url", claimToken: null, claimedUntil: null });
      return;
    }
    const startedAt = clock.now();
    const result = await sender.send({
      url: event.callbackUrl,
      headers: webhookHeaders(activeSecrets(client, startedAt), event.id, Math.floor(startedAt / 1000), event.payload),
      body: event.payload,
      timeoutMs: config.webhookTimeoutMs,
    });
    const now = clock.now();
    const attempts = event.attempts + 1;
    const roundAttempts = event.roundAttempts + 1;
    const patch: Partial<NewEventRow> = {
      attempts,
      roundAttempts,
      lastAttemptAt: startedAt,
      lastStatusCode: result.statusCode,
      lastError: result.error,
      claimToken: null,
      claimedUntil: null,
    };
    let outcome: string;
    if (result.ok) {
      Object.assign(patch, { deliveryStatus: "succeeded", deliveredAt: now, nextAttemptAt: null });
      outcome = "delivered";
    } else if (result.gone) {
      // 410 Gone: the receiver asked us to stop; the event stays redeliverable by hand.
      Object.assign(patch, { deliveryStatus: "failed", failedAt: now, nextAttemptAt: null });
      outcome = "gone";
    } else {
      const scheduled = retryDelayMs(config.webhookRetryScheduleMs, roundAttempts, this.opts.random);
      if (scheduled === null) {
        Object.assign(patch, { deliveryStatus: "failed", failedAt: now, nextAttemptAt: null });
        outcome = "exhausted";
      } else {
        const delay = Math.max(scheduled, result.retryAfterMs ?? 0);
        Object.assign(patch, { nextAttemptAt: now + delay });
        outcome = "retry";
      }
    }
    db.transaction((tx) => {
      insertAttempt(tx, {
        id: newId("att", startedAt),
        eventId: event.id,
        taskId: event.taskId,
        clientId: event.clientId,
        eventType: event.type,
        url: event.callbackUrl!,
        attemptedAt: startedAt,
        statusCode: result.statusCode,
        latencyMs: Math.round(result.latencyMs),
        outcome: result.ok ? "succeeded" : result.blocked ? "blocked" : "failed",
        error: result.error,
        responseBody: result.responseBody,
      });
      updateLeasedEvent(tx, event.id, token, patch);
    });
    this.opts.onAttempt?.(event, result);
    logger.info(
      {
        event_id: event.id,
        task_id: event.taskId,
        client_id: event.clientId,
        type: event.type,
        attempt: attempts,
        status_code: result.statusCode,
        latency_ms: Math.round(result.latencyMs),
        outcome,
        error: result.error ?? undefined,
      },
      "webhook attempt",
    );
  }
}

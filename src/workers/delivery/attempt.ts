import type { Clock } from "../../clock.js";
import { type AttemptLine, attemptLines, type Logger } from "../../logger.js";
import type { DeliveryLifecycle } from "../../core/delivery.js";
import { pausedTrialUntil } from "../../core/delivery-plan.js";
import type { KeyHealth } from "../../core/key-health.js";
import type { DestinationMessage, Destinations } from "../../destinations/index.js";
import { splitDeliveryKey } from "../../store/delivery-key.js";
import type { EventStore } from "../../store/store.js";
import type { ClientRow, ClaimedEvent } from "../../store/rows.js";
import {
  breakerOutcome,
  type BreakerTransition,
  type CircuitBreakers,
  type Permit,
} from "../../webhooks/circuit-breaker.js";
import { sendResult, type SendResult } from "../../webhooks/sender.js";
import { deliveryMessage } from "./message.js";
import { tracedSend, type TracedOutcome } from "./traced.js";
import { storedContext } from "../../telemetry/index.js";

/** What one attempt needs: the port it sends through and what sits around it. */
export interface AttemptDeps {
  /** Moves a key's due events to the end of its circuit's cool-down when it opens. */
  events: Pick<EventStore, "postponeKey">;
  clock: Clock;
  logger: Logger;
  destinations: Destinations;
  breakers: CircuitBreakers;
  lifecycle: DeliveryLifecycle;
  encryptionKey: Buffer | null;
  timeoutMs: number;
  /** The whole retry schedule's time: how long an event may wait for a paused host without spending retries on trials. */
  scheduleSpanMs: number;
  health?: KeyHealth | undefined;
  onAttempt?: ((event: ClaimedEvent, result: SendResult) => void) | undefined;
}

/**
 * One delivery attempt, around the destination port: sign, send through the event's kind (its
 * address guard first), hand the breaker its permit back with the outcome, record the attempt and
 * the event's next state, say what a circuit's opening or closing means, and follow the key's health.
 */
export class Attempts {
  /** The attempt's line: fixed fields, none a secret, written by hand (logger.ts). */
  private readonly attemptLog: (level: "info", line: AttemptLine) => void;

  constructor(private readonly deps: AttemptDeps) {
    this.attemptLog = attemptLines(deps.logger);
  }

  /**
   * `queued`: told just before the record is queued, and whether the attempt changed no circuit
   * (then the dispatcher hands its slot back early, so the refill's claim shares the record's commit).
   */
  async deliver(
    event: ClaimedEvent,
    client: ClientRow,
    permit: Permit,
    queued?: (unchanged: boolean) => void,
  ): Promise<void> {
    const { clock, breakers } = this.deps;
    const startedAt = clock.now();
    let result: SendResult;
    let ids: TracedOutcome["ids"];
    try {
      // Signed here, around the port: every kind carries the same signed message.
      const message = deliveryMessage(event, client, startedAt, this.deps.encryptionKey);
      // Under the task's trace, each attempt its own span (a retry's resend count is its attempts so far).
      ({ outcome: result, ids } = await tracedSend(
        this.deps.destinations,
        message,
        { timeoutMs: this.deps.timeoutMs },
        { trace: storedContext(event), resendCount: event.attempts },
      ));
    } catch (err) {
      // send() never throws; if signing did, the permit must still go back (a lost trial would keep the circuit shut).
      breakers.record(permit, "neutral");
      throw err;
    }
    const outcome = breakerOutcome(result);
    const transition = breakers.record(permit, outcome);
    const pausedUntil = pausedTrialUntil({
      trial: permit.trial,
      reopenedUntil: transition?.kind === "opened" ? transition.until : null,
      waitedMs: clock.now() - event.createdAt,
      scheduleSpanMs: this.deps.scheduleSpanMs,
    });
    queued?.(!transition);
    const recorded = this.record(event, startedAt, result, pausedUntil, false, ids);
    // Endpoint health counts any answer but a 2xx as failing (a receiver answering 404 to everything
    // is failing too). Queued in the same turn as the record, so the key's health change shares the
    // record's transaction where the store group-commits both (SQLite); observe never throws.
    const observed = this.observe(
      event,
      outcome === "neutral" ? "neutral" : result.ok ? "success" : "failure",
      result.error,
    );
    try {
      await recorded;
    } finally {
      await observed;
    }
    if (transition) await this.onTransition(transition);
  }

  /** A test ping under the key's breaker permit: its outcome counts like an attempt's, and an opening is said the same way. */
  async ping(permit: Permit, message: DestinationMessage): Promise<SendResult> {
    // Through the port like a delivery (its kind's address guard, the deadline), signed by the caller.
    const result = await this.deps.destinations.send(message, { timeoutMs: this.deps.timeoutMs });
    const transition = this.deps.breakers.record(permit, breakerOutcome(result));
    if (transition) await this.onTransition(transition);
    return result;
  }

  /** Records a failed attempt without sending: the body is over `limit` and would be every time. */
  async refuseOversized(event: ClaimedEvent, size: number, limit: number): Promise<void> {
    const result = sendResult({ error: `payload too large: ${size} bytes, the limit is ${limit}; not sent` });
    await this.record(event, this.deps.clock.now(), result, null, true);
  }

  /**
   * The circuit opened: the host's due events move to the end of the cool-down (no attempt, no
   * retry step spent), and that is said once per opening, not once per postponed event.
   */
  async onTransition(t: BreakerTransition): Promise<void> {
    const { events, clock, logger } = this.deps;
    const [clientId, host] = splitDeliveryKey(t.host);
    if (t.kind === "closed") {
      logger.info({ client_id: clientId, host }, "circuit closed: deliveries to host resumed");
      return;
    }
    const postponed = await events.postponeKey(clientId, host, t.until, clock.now());
    logger.warn(
      {
        client_id: clientId,
        host,
        consecutive_failures: t.failures,
        after_trial: t.afterTrial,
        cool_down_ms: t.coolDownMs,
        retry_at: new Date(t.until).toISOString(),
        postponed,
      },
      "circuit open: deliveries to host paused",
    );
  }

  /** The key's health for failure notices; never fails the delivery it follows. */
  private async observe(
    event: ClaimedEvent,
    outcome: ReturnType<typeof breakerOutcome>,
    error: string | null,
  ): Promise<void> {
    try {
      await this.deps.health?.observe({ clientId: event.clientId, host: event.destinationHost }, outcome, error);
    } catch (err) {
      this.deps.logger.error({ err, event_id: event.id }, "endpoint health bookkeeping failed");
    }
  }

  /** Writes the attempt and the event's new state together (DeliveryLifecycle.recordAttempt); one log line per attempt. */
  private async record(
    event: ClaimedEvent,
    startedAt: number,
    result: SendResult,
    pausedUntil: number | null = null,
    refused = false,
    ids: TracedOutcome["ids"] = {},
  ): Promise<void> {
    const { logger, lifecycle } = this.deps;
    const attempts = event.attempts + 1;
    // Group-committed by the store: attempts settling together share one transaction and one fsync.
    const { outcome } = refused
      ? await lifecycle.refuse(event, result)
      : pausedUntil !== null
        ? await lifecycle.recordPausedTrial(event, startedAt, result, pausedUntil)
        : await lifecycle.recordAttempt(event, startedAt, result);
    this.deps.onAttempt?.(event, result);
    if (outcome === "exhausted") {
      await this.deps.health?.exhausted(event, attempts, result.error).catch((err: unknown) => {
        logger.error({ err, event_id: event.id }, "writing the delivery.exhausted notice failed");
      });
    }
    this.attemptLog("info", {
      event_id: event.webhookId ?? event.id,
      destination: event.endpointId ?? "callback",
      task_id: event.taskId,
      client_id: event.clientId,
      type: event.type,
      attempt: attempts,
      status_code: result.statusCode,
      latency_ms: Math.round(result.latencyMs),
      outcome,
      error: result.error ?? undefined,
      // The ids of the traceparent the attempt carried: the receiver's trace finds this line (the
      // attempt's span has ended by now, so the logger's own trace fields would be missing).
      ...ids,
    });
  }
}

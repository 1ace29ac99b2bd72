import type { Clock } from "../../clock.js";
import type { DeliveryLifecycle } from "../../core/delivery.js";
import type { Logger } from "../../logger.js";
import { splitDeliveryKey } from "../../store/delivery-key.js";
import type { EventStore } from "../../store/store.js";
import type { ClientRow, ClaimedEvent } from "../../store/rows.js";
import type { CircuitBreakers, Permit } from "../../webhooks/circuit-breaker.js";
import type { LeaseOwner } from "../owner.js";

/**
 * One claimed event to start: a delivery, or a paused key's trial (its breaker permit already
 * taken). `client` is the event's client as the claim found it.
 */
export interface Claim {
  event: ClaimedEvent;
  client: ClientRow | undefined;
  trial?: Permit;
  /** Its key's refill, when it was asked as the attempt's record was queued (Dispatcher.withSlot). */
  refilled?: Promise<boolean>;
}

export interface TrialDeps {
  store: { events: Pick<EventStore, "claimTrial" | "pendingOfKey"> };
  clock: Clock;
  owner: Pick<LeaseOwner, "token">;
  logger: Logger;
  breakers: CircuitBreakers;
  lifecycle: Pick<DeliveryLifecycle, "release">;
}

/**
 * The half-open trial of a paused key whose cool-down is over: the breaker's permit, then one of
 * the key's own events, an attempted one first. With none due the trial waits: a key with nothing
 * pending is forgotten, one whose events are due later is looked at again a cool-down later, so a
 * paused key with nothing to send costs no query per tick. Every way out without an event hands
 * the permit back here, so a database error never leaves the key refused for good; with an event,
 * the permit goes with it, to be recorded by its attempt (or handed back by the dispatcher's run).
 */
export async function claimTrial(
  deps: TrialDeps,
  key: string,
  leaseMs: number,
  clientOf: (id: string) => Promise<ClientRow | undefined>,
): Promise<Claim | null> {
  const { store, clock, owner, breakers } = deps;
  const [clientId, host] = splitDeliveryKey(key);
  const permit = breakers.acquire(key);
  if (!permit) return null;
  let event: ClaimedEvent | undefined;
  try {
    event = await store.events.claimTrial({ clientId, host }, { now: clock.now(), leaseMs, token: owner.token() });
    if (!event) {
      breakers.record(permit, "neutral");
      const pending = await store.events.pendingOfKey({ clientId, host });
      if (pending === 0) breakers.forget(key);
      else breakers.deferTrial(key);
      return null;
    }
    return { event, client: await clientOf(clientId), trial: permit };
  } catch (err) {
    breakers.record(permit, "neutral");
    if (event) await deps.lifecycle.release(event, null).catch(() => {});
    deps.logger.error({ err, host, client_id: clientId }, "claiming a circuit trial failed; it is tried again later");
    return null;
  }
}

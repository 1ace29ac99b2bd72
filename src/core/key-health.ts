import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { ERROR_BYTES, storableText } from "./stored-text.js";
import { newId } from "../ids.js";
import { deliveryKey } from "../store/delivery-key.js";
import type { DeliveryKey, Store } from "../store/store.js";
import type { ClaimedEvent, ClientRow } from "../store/rows.js";
import type { BreakerOutcome } from "../webhooks/circuit-breaker.js";
import { destinationHost } from "../webhooks/destination.js";

/** The operational notices a client's notification_url receives (docs/contract.md, "Failure notices"). */
export type NoticeType = "endpoint.failing" | "endpoint.recovered" | "delivery.exhausted";

export interface NoticeDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  /** Called when a notice is written (wakes the notifier loop). */
  onNotice?: () => void;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Keys known to have answered 2xx since this process last saw them fail: their 2xx need no write. */
const HEALTHY_MEMORY = 10_000;
/**
 * How long that knowledge is trusted: another instance may have seen the key fail since (its
 * failures are in the store, not here), so a 2xx is written again at least this often.
 */
const HEALTHY_TRUST_MS = 60_000;

/**
 * Writes a notice for a client, unless it has no notification_url or that URL is on the host the
 * notice is about (a failing host is never told that it fails). Returns whether one was written.
 */
export async function writeNotice(
  deps: NoticeDeps,
  client: ClientRow,
  type: NoticeType,
  aboutHost: string,
  data: Record<string, unknown>,
): Promise<boolean> {
  const url = client.notificationUrl;
  if (!url || client.revokedAt !== null) return false;
  if (destinationHost(url) === aboutHost) {
    deps.logger.warn(
      { client_id: client.id, host: aboutHost, type },
      "notice not sent: notification_url is on the host it is about",
    );
    return false;
  }
  const now = deps.clock.now();
  const id = newId("evt", now);
  const payload = JSON.stringify({ id, type, timestamp: iso(now), data });
  await deps.store.notices.insert({
    id,
    clientId: client.id,
    type,
    payload,
    url,
    deliveryStatus: "pending",
    nextAttemptAt: now,
    createdAt: now,
  });
  deps.logger.info({ client_id: client.id, notice_id: id, type, host: aboutHost }, "notice written");
  deps.onNotice?.();
  return true;
}

/**
 * Follows each delivery key's health from the dispatcher's attempts: a failing run starts at the
 * first failure after a 2xx and ends at the next 2xx (endpoint.recovered when endpoint.failing went
 * out for it). Kept in the store, so "failing for an hour" survives restarts and spans instances;
 * a 2xx costs a write only when this process does not already know the key to be healthy.
 */
export class KeyHealth {
  /** Key → when its last 2xx was written. */
  private readonly healthy = new Map<string, number>();

  constructor(private readonly deps: NoticeDeps) {}

  async observe(key: DeliveryKey, outcome: BreakerOutcome, error: string | null): Promise<void> {
    if (outcome === "neutral") return;
    const id = deliveryKey(key.clientId, key.host);
    const now = this.deps.clock.now();
    if (outcome === "failure") {
      this.healthy.delete(id);
      await this.deps.store.keyHealth.recordFailure(key, now, storableText(error, ERROR_BYTES));
      return;
    }
    const known = this.healthy.get(id);
    if (known !== undefined && now - known < HEALTHY_TRUST_MS) return;
    if (this.healthy.size >= HEALTHY_MEMORY) this.healthy.clear();
    this.healthy.set(id, now);
    const ended = await this.deps.store.keyHealth.recordSuccess(key, now);
    if (!ended || ended.noticeSentAt === null) return;
    const client = await this.deps.store.clients.find(key.clientId);
    if (client)
      await writeNotice(this.deps, client, "endpoint.recovered", key.host, {
        host: key.host,
        failing_since: iso(ended.failingSince),
        recovered_at: iso(now),
      });
  }

  /** An event's last scheduled attempt failed: delivery.exhausted. */
  async exhausted(event: ClaimedEvent, attempts: number, lastError: string | null): Promise<void> {
    const client = await this.deps.store.clients.find(event.clientId);
    if (!client) return;
    await writeNotice(this.deps, client, "delivery.exhausted", event.destinationHost, {
      event_id: event.webhookId ?? event.id,
      task_id: event.taskId,
      type: event.type,
      host: event.destinationHost,
      attempts,
      last_error: storableText(lastError, ERROR_BYTES),
    });
  }

  /**
   * endpoint.failing for every key answering no 2xx since `failingAfterMs` ago and not yet noticed.
   * Each failing run is noticed once across every process (markNoticed decides). Returns how many were written.
   */
  async noticeFailing(failingAfterMs: number): Promise<number> {
    const { store, clock } = this.deps;
    const now = clock.now();
    let written = 0;
    for (const row of await store.keyHealth.dueForNotice(now - failingAfterMs, 100)) {
      const key = { clientId: row.clientId, host: row.host };
      if (!(await store.keyHealth.markNoticed(key, row.failingSince!, now))) continue;
      const client = await store.clients.find(row.clientId);
      if (!client) continue;
      const pending = await store.events.pendingOfKey(key);
      const data = {
        host: row.host,
        failing_since: iso(row.failingSince!),
        attempts: row.failedAttempts,
        pending_events: pending,
        last_error: row.lastError,
      };
      if (await writeNotice(this.deps, client, "endpoint.failing", row.host, data)) written += 1;
    }
    return written;
  }
}

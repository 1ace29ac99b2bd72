import type { DestinationMessage } from "../destinations/index.js";
import { WEBHOOK_KIND } from "../destinations/http.js";
import { recoverFailed, redeliverLast, redeliverToEndpoints } from "../core/delivery.js";
import { newId } from "../ids.js";
import { validateCallbackUrl } from "../net/address-guard.js";
import { signedMessage } from "../webhooks/outgoing.js";
import type { SendResult } from "../webhooks/sender.js";
import type { ServiceDeps } from "./deps.js";
import type { EventRow } from "../store/rows.js";
import { ApiError } from "./errors.js";
import { rotateSecret } from "./clients.js";
import { requireClientTask } from "./tasks.js";
import { iso } from "../core/task-view.js";
import { sampleBody, type TestEventType } from "./sample-events.js";
import { rotateSigningKey } from "./webhook-settings.js";

/** Sends test pings under the same per-key cap and breaker as deliveries (the dispatcher). */
export interface PingGate {
  ping(message: DestinationMessage): Promise<SendResult | null>;
  /** Makes the key's waiting and paused events due at once, its circuit's next attempt a trial; how many were made due. */
  retryHost(clientId: string, host: string): Promise<number>;
}

/** Test pings a client may send per minute: enough to debug a receiver, too few to make the relay a POST proxy. */
export const PINGS_PER_MINUTE = 10;
/** Redelivers, retry-nows and recovers a client may ask for per minute, each: every one is a POST (or many) the relay makes on request. */
export const TRIGGERS_PER_MINUTE = 10;

/** `hostname:port` as the dispatcher keys hosts (a bracketed IPv6 literal included). */
const HOST_PORT = /^(?:[a-z0-9._-]{1,253}|\[[0-9a-f:.]{2,45}\]):\d{1,5}$/i;

type Trigger = "ping" | "redeliver" | "retry" | "recover";
const TRIGGER_TEXT: Record<Trigger, string> = {
  ping: "test webhooks",
  redeliver: "redelivers",
  retry: "retry-nows",
  recover: "recovers",
};

/** Delivery operations a client can run on its own tasks and events. */
export class DeliveryService {
  constructor(
    private readonly deps: ServiceDeps,
    private readonly gate: PingGate,
  ) {}

  /**
   * Per-client sliding window of each kind of request that makes the relay send on demand (test
   * pings, redelivers, retry-nows, recovers), counted in the store so that every instance sharing
   * it counts the same requests (docs/contract.md, "Limits hold across instances"); throws 429 rate_limit past its limit a minute.
   */
  private async take(kind: Trigger, clientId: string, now: number): Promise<void> {
    const limit = kind === "ping" ? PINGS_PER_MINUTE : TRIGGERS_PER_MINUTE;
    const verdict = await this.deps.store.limits.take(clientId, kind, now, limit, 60_000);
    if (verdict.allowed) return;
    const retry = Math.max(1, Math.ceil((verdict.retryAt - now) / 1000));
    throw new ApiError(
      "rate_limit",
      `At most ${limit} ${TRIGGER_TEXT[kind]} a minute. Retry in ${retry} s.`,
      undefined,
      { "Retry-After": String(retry) },
    );
  }

  /**
   * Retry-now for one of the client's callback hosts (`hostname:port`): its waiting and paused
   * events are sent at once, the first as the circuit's trial.
   */
  async retryHost(clientId: string, host: string) {
    const h = host.trim().toLowerCase();
    if (!HOST_PORT.test(h)) {
      throw new ApiError(
        "invalid_request",
        "host must be hostname:port, as in the failing-host list (URL-encoded in the path).",
        [{ field: "host", message: "expected hostname:port" }],
      );
    }
    await this.take("retry", clientId, this.deps.clock.now());
    const requeued = await this.gate.retryHost(clientId, h);
    return { host: h, requeued };
  }

  /** The client's callback hosts answering no 2xx now, with their pending events. */
  async failingHosts(clientId: string) {
    const { store } = this.deps;
    const rows = await store.keyHealth.failingOf(clientId);
    return Promise.all(
      rows.map(async (r) => ({
        host: r.host,
        failing_since: iso(r.failingSince)!,
        attempts: r.failedAttempts,
        pending_events: await store.events.pendingOfKey({ clientId, host: r.host }),
        last_error: r.lastError,
      })),
    );
  }

  async listAttempts(clientId: string, taskId: string) {
    const task = await requireClientTask(this.deps, clientId, taskId);
    // An endpoint's attempts are logged against its own delivery row: shown under the event's id
    // (the webhook-id every destination got) and the endpoint's id as the destination.
    const rows = new Map((await this.deps.store.events.ofTask(task.id)).map((e) => [e.id, e]));
    return (await this.deps.store.events.attemptsOfTask(task.id)).map((a) => ({
      id: a.id,
      event_id: rows.get(a.eventId)?.webhookId ?? a.eventId,
      destination: rows.get(a.eventId)?.endpointId ?? "callback",
      event_type: a.eventType,
      url: a.url,
      attempted_at: iso(a.attemptedAt)!,
      outcome: a.outcome as "succeeded" | "failed" | "blocked",
      status_code: a.statusCode,
      latency_ms: a.latencyMs,
      error: a.error,
      response_body: a.responseBody,
    }));
  }

  /** Queues the task's last event again: a new attempt with the same webhook-id and body. */
  async redeliver(clientId: string, taskId: string) {
    const { store, clock } = this.deps;
    const task = await requireClientTask(this.deps, clientId, taskId);
    // The last event goes again to every destination it had: the task's callback_url and the
    // endpoints it went to that still exist.
    const last = await store.events.lastOfTask(task.id);
    const toEndpoints = last
      ? (await store.webhookEndpoints.deliveriesOfTasks([task.id])).filter(
          (r) => r.webhookId === last.id && r.deliveryStatus !== "ended",
        )
      : [];
    if (!task.callbackUrl && toEndpoints.length === 0)
      throw new ApiError("invalid_request", "This task has no callback_url or endpoint to deliver to.");
    await this.take("redeliver", clientId, clock.now());
    const updated = task.callbackUrl ? await redeliverLast(store, task.id, clock.now()) : last;
    if (!updated)
      throw new ApiError("invalid_request", "This task has no event yet; it is sent when the task changes state.");
    await redeliverToEndpoints(
      store,
      toEndpoints.map((r) => r.id),
      clock.now(),
    );
    this.deps.nudges.dispatcher();
    return {
      event_id: updated.id,
      event_type: updated.type,
      status: task.callbackUrl ? updated.deliveryStatus : "pending",
    };
  }

  /**
   * Sends a signed `ping` through the same guard, signer, headers, per-host cap and breaker as real
   * deliveries, and reports the attempt: status and latency, never the receiver's body (the relay
   * must not become an open POST proxy or a port-scan oracle).
   */
  async testWebhook(clientId: string, url: unknown, type: TestEventType = "ping", kind: "image" | "video" = "image") {
    const { store, clock, config } = this.deps;
    const verdict = validateCallbackUrl(url, { allowPrivateNetworks: config.webhookAllowPrivateNetworks });
    if (!verdict.ok)
      throw new ApiError("invalid_callback_url", `url is not acceptable: ${verdict.reason}.`, [
        { field: "url", message: verdict.reason },
      ]);
    const now = clock.now();
    await this.take("ping", clientId, now);
    const client = (await store.clients.find(clientId))!;
    const id = newId("evt", now);
    const catalog = this.deps.catalog?.peek(client.upstreamAccount) ?? null;
    const body = sampleBody(type, { eventId: id, clientId: client.id, url: verdict.url, now, kind, catalog });
    // A sample to one of the client's endpoints carries that endpoint's headers, as its real
    // deliveries do (endpoint-fanout.ts): a catch hook that checks its header token accepts it.
    const endpoint = (await store.webhookEndpoints.list(clientId)).find(
      (ep) => ep.kind === "webhook" && ep.url === verdict.url,
    );
    const message = signedMessage({
      target: { kind: WEBHOOK_KIND, address: verdict.url, tenant: clientId },
      client,
      id,
      at: now,
      body,
      encryptionKey: config.encryptionKey,
      callbackHeaders: endpoint?.headers ?? null,
      type,
      taskId: null,
    });
    const result = await this.gate.ping(message);
    if (!result) {
      throw new ApiError(
        "rate_limit",
        "Deliveries to this host are at their limit, or its circuit is open after failures. Retry later.",
        undefined,
        { "Retry-After": "30" },
      );
    }
    return {
      webhook_id: id,
      type,
      url: verdict.url,
      succeeded: result.ok,
      status_code: result.statusCode,
      latency_ms: Math.round(result.latencyMs),
      error: result.error,
    };
  }

  /** Rotates the key of the scheme in use: the whsec_ secret (hmac) or the Ed25519 signing key, whose new public key is returned. */
  async rotateSecret(
    clientId: string,
  ): Promise<
    | { webhook_secret: string; previous_secret_expires_at: string }
    | { signature: "ed25519"; public_key: string; previous_key_expires_at: string }
  > {
    const client = await this.deps.store.clients.find(clientId);
    if (client?.signatureScheme === "ed25519") {
      const rotated = (await rotateSigningKey(this.deps, clientId, this.deps.config.encryptionKey))!;
      return {
        signature: "ed25519",
        public_key: rotated.publicKey,
        previous_key_expires_at: iso(rotated.previousExpiresAt)!,
      };
    }
    const rotated = (await rotateSecret(this.deps, clientId, this.deps.config.encryptionKey))!;
    return { webhook_secret: rotated.secret, previous_secret_expires_at: iso(rotated.previousExpiresAt)! };
  }

  /**
   * The pull feed: events after a cursor, oldest first. The cursor is opaque and per client: it
   * encodes the client's own feed position (client_seq), which says nothing about other tenants.
   * Cursors of the older relay-wide form (`e<seq>`) are still understood.
   */
  async listEvents(clientId: string, after: string | undefined, limit: number) {
    const afterPos = after ? await this.feedPosition(clientId, after) : 0;
    const rows = await this.deps.store.events.feed(clientId, afterPos, limit);
    const lastPos = rows.length > 0 ? rows[rows.length - 1]!.clientSeq : afterPos;
    // Each event's deliveries to the client's endpoints, beside its callback's (`delivery`).
    const toEndpoints = new Map<string, EventRow[]>();
    if (rows.length > 0)
      for (const r of await this.deps.store.webhookEndpoints.deliveriesOfTasks([...new Set(rows.map((e) => e.taskId))]))
        toEndpoints.set(r.webhookId!, [...(toEndpoints.get(r.webhookId!) ?? []), r]);
    // Counts from the attempt log, the one record of what was sent: an attempt whose lease was taken
    // back (its endpoint deleted meanwhile) is logged but never counted on its row.
    const counted = await this.deps.store.events.attemptCounts([
      ...rows.map((e) => e.id),
      ...[...toEndpoints.values()].flat().map((r) => r.id),
    ]);
    const attempts = (id: string) => counted.get(id) ?? 0;
    return {
      data: rows.map((e) => ({
        id: e.id,
        ...(JSON.parse(e.payload) as { type: string; timestamp: string; data: Record<string, never> }),
        delivery: { status: e.deliveryStatus, attempts: attempts(e.id), last_status_code: e.lastStatusCode },
        endpoints: (toEndpoints.get(e.id) ?? []).map((r) => ({
          endpoint_id: r.endpointId!,
          status: r.deliveryStatus,
          attempts: attempts(r.id),
          last_status_code: r.lastStatusCode,
        })),
      })),
      // Always a cursor, even on an empty page: the caller keeps it and asks again later.
      next_cursor: Buffer.from(`c${lastPos}`).toString("base64url"),
    };
  }

  /** The client's feed position a cursor of listEvents names (its event stream starts there too). */
  async feedPosition(clientId: string, after: string): Promise<number> {
    const text = Buffer.from(after, "base64url").toString("utf8");
    const own = /^c(\d{1,15})$/.exec(text);
    const legacy = /^e(\d{1,15})$/.exec(text);
    if (own) return Number(own[1]);
    if (legacy) return this.deps.store.events.clientSeqAtOrBefore(clientId, Number(legacy[1]));
    throw new ApiError("invalid_request", "after is not a cursor this API returned.", [
      { field: "after", message: "unrecognised cursor" },
    ]);
  }

  /** Re-queues the client's failed deliveries since a time: each is a POST again, so it is rate-limited like redeliver. */
  async recover(clientId: string, since: number) {
    await this.take("recover", clientId, this.deps.clock.now());
    const requeued = await recoverFailed(this.deps.store, clientId, since, this.deps.clock.now());
    if (requeued > 0) this.deps.nudges.dispatcher();
    return { requeued };
  }

  /** Task counts (of retained tasks) and the credit ledger's totals, which survive pruning. */
  async usage(clientId: string) {
    const { store } = this.deps;
    const p = (await store.clients.creditPosition(clientId))!;
    return {
      tasks: await store.tasks.countsOfClient(clientId),
      points_charged: p.charged,
      points_refunded: p.refunded,
      points_reserved: p.reserved,
      points_spent: p.charged - p.refunded,
      credit_limit: p.limit,
    };
  }
}

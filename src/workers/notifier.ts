import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { KeyHealth } from "../core/key-health.js";
import type { Store } from "../store/store.js";
import type { NoticeRow } from "../store/rows.js";
import { NoticeLifecycle } from "../core/notices.js";
import { webhookDestinations, WEBHOOK_KIND } from "../destinations/http.js";
import type { Destinations } from "../destinations/index.js";
import { signedMessage } from "../webhooks/outgoing.js";
import type { WebhookSender } from "../webhooks/sender.js";
import type { LeaseOwner } from "./owner.js";
import { PooledWorker } from "./pooled-loop.js";

/** The notifier's port of the Store: the notices' outbox and the clients it signs for. */
export type NotifierStore = Pick<Store, "notices" | "clients">;

export interface NotifierOptions {
  store: NotifierStore;
  clock: Clock;
  config: Config;
  logger: Logger;
  /** The HTTP transport, when no registry is given (destinations). */
  sender: Pick<WebhookSender, "send">;
  /** Where notices go: the relay's registry, so a notice passes the same address guard and deadline as a delivery. */
  destinations?: Pick<Destinations, "send">;
  owner: LeaseOwner;
  health: KeyHealth;
  /** Notices in flight at once, a FairPool shared by the clients (they are few; default 8). */
  maxInFlight?: number;
  random?: () => number;
}

/**
 * Operational notices (docs/contract.md, "Failure notices"): finds callback hosts that have answered no 2xx for
 * WEBHOOK_FAILING_NOTICE_AFTER and writes endpoint.failing for them, and delivers every pending
 * notice to its client's notification_url, signed like webhooks, on WEBHOOK_RETRY_SCHEDULE.
 * Notices have their own outbox and loop, so a client's failing receivers never hold back the
 * notice that tells it so; their slots are a FairPool (docs/decisions/0008-fair-pool.md), so one
 * client's many notices to a slow notification_url hold at most its share, and another client's
 * notice finds a slot at once.
 */
export class Notifier extends PooledWorker<NoticeRow> {
  private readonly notices: NoticeLifecycle;
  private readonly destinations: Pick<Destinations, "send">;

  constructor(private readonly opts: NotifierOptions) {
    super({ size: opts.maxInFlight ?? 8 });
    this.destinations =
      opts.destinations ??
      webhookDestinations(opts.sender, { allowPrivateNetworks: opts.config.webhookAllowPrivateNetworks });
    this.notices = new NoticeLifecycle({
      store: opts.store,
      clock: opts.clock,
      retryScheduleMs: opts.config.webhookRetryScheduleMs,
      ...(opts.random ? { random: opts.random } : {}),
    });
  }

  /** How often failing hosts are looked for: often enough that a notice is at most this late. */
  private get scanEveryMs(): number {
    return Math.min(60_000, Math.max(1_000, Math.floor(this.opts.config.webhookFailingNoticeAfterMs / 4)));
  }

  async nextDueAt(full: boolean): Promise<number | null> {
    const now = this.opts.clock.now();
    const next = now + this.scanEveryMs;
    // Full: a settling notice wakes the loop (onSettled); only the next scan is worth a timer.
    if (this.slots.claimable <= 0) return next;
    const due = await this.opts.store.notices.nextDueAt(now);
    if (due === null) return next;
    // Due notices a claim with room left behind are of clients at their share: a settle wakes the
    // loop for them; a second is the longest they wait otherwise (no spinning on them meanwhile).
    const dueAt = due <= now && !full ? now + 1_000 : Math.max(due, now);
    return Math.min(dueAt, next);
  }

  /** Writes the failing notices due, then claims due notices within each client's room in the pool. */
  async claim(start: (notice: NoticeRow) => void): Promise<{ full: boolean }> {
    const { store, clock, config, owner, health } = this.opts;
    await health.noticeFailing(config.webhookFailingNoticeAfterMs);
    const room = this.slots.claimable;
    if (room <= 0) return { full: false };
    const now = clock.now();
    const claimed = await store.notices.claimDue({
      now,
      leaseMs: config.webhookTimeoutMs + 5_000,
      token: owner.token(),
      limit: room,
      excludeClients: this.slots.busyClients(),
      clientRoom: (clientId, picked) => this.slots.room(clientId, picked),
    });
    for (const notice of claimed) start(notice);
    return { full: claimed.length >= room };
  }

  /** One notice in its slot, sized by the claim (clientRoom), so the slot is there. */
  run(notice: NoticeRow): Promise<void> {
    const slot = this.slots.take(notice.clientId, notice.clientId);
    return this.deliver(notice).finally(() => slot.release());
  }

  failed(notice: NoticeRow, err: unknown): void {
    this.opts.logger.error({ err, notice_id: notice.id }, "notice bookkeeping failed");
  }

  private async deliver(notice: NoticeRow): Promise<void> {
    const { store, clock, config, logger } = this.opts;
    const client = await store.clients.find(notice.clientId);
    if (!client || client.revokedAt !== null) return this.notices.fail(notice, "client revoked");
    const startedAt = clock.now();
    const message = signedMessage({
      target: { kind: WEBHOOK_KIND, address: notice.url, tenant: notice.clientId },
      client,
      id: notice.id,
      at: startedAt,
      body: notice.payload,
      encryptionKey: config.encryptionKey,
      type: notice.type,
      taskId: null,
    });
    const result = await this.destinations.send(message, { timeoutMs: config.webhookTimeoutMs });
    await this.notices.recordAttempt(notice, result);
    logger.info(
      {
        notice_id: notice.id,
        client_id: notice.clientId,
        type: notice.type,
        attempt: notice.attempts + 1,
        status_code: result.statusCode,
        error: result.error ?? undefined,
      },
      "notice attempt",
    );
  }
}

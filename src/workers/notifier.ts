import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { EndpointHealth } from "../services/notices.js";
import type { NoticeRow, Store } from "../store/store.js";
import { storableText, ERROR_BYTES } from "../core/stored-text.js";
import { outgoingHeaders } from "../webhooks/outgoing.js";
import { retryDelayMs } from "../webhooks/schedule.js";
import type { WebhookSender } from "../webhooks/sender.js";
import type { TickResult } from "./loop.js";
import type { LeaseOwner } from "./owner.js";

export interface NotifierOptions {
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  sender: WebhookSender;
  owner: LeaseOwner;
  health: EndpointHealth;
  /** Notices in flight at once (they are few; default 8). */
  maxInFlight?: number;
  random?: () => number;
}

/**
 * Operational notices (DESIGN §12): finds callback hosts that have answered no 2xx for
 * WEBHOOK_FAILING_NOTICE_AFTER and writes endpoint.failing for them, and delivers every pending
 * notice to its client's notification_url, signed like webhooks, on WEBHOOK_RETRY_SCHEDULE.
 * Notices have their own outbox and loop, so a client's failing receivers never hold back the
 * notice that tells it so.
 */
export class Notifier {
  private readonly inFlight = new Set<Promise<void>>();
  private readonly maxInFlight: number;

  constructor(private readonly opts: NotifierOptions) {
    this.maxInFlight = opts.maxInFlight ?? 8;
  }

  /** How often failing hosts are looked for: often enough that a notice is at most this late. */
  private get scanEveryMs(): number {
    return Math.min(60_000, Math.max(1_000, Math.floor(this.opts.config.webhookFailingNoticeAfterMs / 4)));
  }

  async tick(): Promise<TickResult> {
    const started = await this.claimAndStart();
    const now = this.opts.clock.now();
    const due = await this.opts.store.notices.nextDueAt(now);
    const next = now + this.scanEveryMs;
    return { didWork: started.length > 0, nextDueAt: due === null ? next : Math.min(Math.max(due, now), next) };
  }

  /** Writes what is due and delivers it, waiting for every attempt (tests). */
  async runOnce(): Promise<number> {
    const started = await this.claimAndStart();
    await Promise.all(started);
    return started.length;
  }

  async drain(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }

  private async claimAndStart(): Promise<Promise<void>[]> {
    const { store, clock, config, owner, logger, health } = this.opts;
    await health.noticeFailing(config.webhookFailingNoticeAfterMs);
    const room = this.maxInFlight - this.inFlight.size;
    if (room <= 0) return [];
    const now = clock.now();
    const claimed = await store.notices.claimDue({ now, leaseMs: config.webhookTimeoutMs + 5_000, token: owner.token(), limit: room });
    return claimed.map((notice) => {
      const work = this.deliver(notice).catch((err: unknown) => logger.error({ err, notice_id: notice.id }, "notice bookkeeping failed"));
      this.inFlight.add(work);
      void work.finally(() => this.inFlight.delete(work));
      return work;
    });
  }

  private async deliver(notice: NoticeRow): Promise<void> {
    const { store, clock, config, sender, logger } = this.opts;
    const client = await store.clients.find(notice.clientId);
    const startedAt = clock.now();
    if (!client || client.revokedAt !== null) {
      await store.notices.record(notice.id, notice.claimToken!, { deliveryStatus: "failed", lastError: "client revoked" });
      return;
    }
    const result = await sender.send({
      url: notice.url,
      headers: outgoingHeaders({ client, id: notice.id, at: startedAt, body: notice.payload, encryptionKey: config.encryptionKey }),
      body: notice.payload,
      timeoutMs: config.webhookTimeoutMs,
    });
    const now = clock.now();
    const attempts = notice.attempts + 1;
    const common = { attempts, lastStatusCode: result.statusCode, lastError: storableText(result.error, ERROR_BYTES) };
    if (result.ok) {
      await store.notices.record(notice.id, notice.claimToken!, { ...common, deliveryStatus: "succeeded", deliveredAt: now, nextAttemptAt: null });
    } else {
      const delay = result.gone ? null : retryDelayMs(config.webhookRetryScheduleMs, attempts, this.opts.random);
      const patch = delay === null ? { deliveryStatus: "failed" as const, nextAttemptAt: null } : { nextAttemptAt: now + Math.max(delay, result.retryAfterMs ?? 0) };
      await store.notices.record(notice.id, notice.claimToken!, { ...common, ...patch });
    }
    logger.info({ notice_id: notice.id, client_id: notice.clientId, type: notice.type, attempt: attempts, status_code: result.statusCode, error: result.error ?? undefined }, "notice attempt");
  }
}

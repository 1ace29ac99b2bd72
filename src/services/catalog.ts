import type { Clock } from "../clock.js";
import type { Logger } from "../logger.js";
import { ApiError } from "./errors.js";
import type { UpstreamAccounts } from "../upstream/accounts.js";

interface Entry {
  body: unknown;
  fetchedAt: number;
  refreshing: Promise<void> | null;
  /** After a failed refresh, no new attempt before this time. */
  retryAt: number;
}

const RETRY_AFTER_FAILURE_MS = 30_000;

/**
 * The upstream model catalog, cached per account. A fresh copy is served from memory; a stale one
 * is served at once while a refresh runs in the background; on upstream failure the last good copy
 * keeps being served (its Age header tells how old). Only with no copy at all does a read fail.
 */
export class CatalogCache {
  private readonly entries = new Map<string, Entry>();
  /** Accounts intake asked about: the background refresh keeps their copies warm. */
  private readonly wanted = new Set<string>(["default"]);

  constructor(
    private readonly accounts: UpstreamAccounts,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly ttlMs = 5 * 60_000,
  ) {}

  async get(account: string): Promise<{ body: unknown; ageSeconds: number }> {
    let entry = this.entries.get(account);
    if (!entry) {
      await this.refresh(account, true);
      entry = this.entries.get(account)!;
    } else if (
      this.clock.now() - entry.fetchedAt > this.ttlMs &&
      !entry.refreshing &&
      this.clock.now() >= entry.retryAt
    ) {
      entry.refreshing = this.refresh(account, false).finally(() => {
        const e = this.entries.get(account);
        if (e) e.refreshing = null;
      });
    }
    return { body: entry.body, ageSeconds: Math.max(0, Math.floor((this.clock.now() - entry.fetchedAt) / 1000)) };
  }

  /** The cached copy for intake's checks, without waiting on the upstream; null when none was fetched yet. */
  peek(account: string): unknown | null {
    this.wanted.add(account);
    return this.entries.get(account)?.body ?? null;
  }

  /**
   * Refreshes every wanted account whose copy is missing or stale (the catalog worker's tick), so
   * intake can check requests without ever waiting on the upstream. Returns when to run again.
   */
  async refreshDue(): Promise<number> {
    const now = this.clock.now();
    let next = now + this.ttlMs;
    for (const account of this.wanted) {
      const entry = this.entries.get(account);
      const due = entry ? Math.max(entry.fetchedAt + this.ttlMs, entry.retryAt) : now;
      if (due <= now) {
        await this.refresh(account, false);
        const after = this.entries.get(account);
        next = Math.min(
          next,
          after && after.fetchedAt >= now ? after.fetchedAt + this.ttlMs : this.clock.now() + RETRY_AFTER_FAILURE_MS,
        );
      } else next = Math.min(next, due);
    }
    return next;
  }

  private async refresh(account: string, mustSucceed: boolean): Promise<void> {
    try {
      const body = await (await this.accounts.get(account)).getModels();
      this.entries.set(account, { body, fetchedAt: this.clock.now(), refreshing: null, retryAt: 0 });
    } catch (err) {
      this.logger.warn({ err: String(err), account }, "catalog refresh failed; serving the cached copy");
      const entry = this.entries.get(account);
      if (entry) entry.retryAt = this.clock.now() + RETRY_AFTER_FAILURE_MS;
      if (mustSucceed)
        throw new ApiError(
          "service_unavailable",
          "The model catalog is not available from the upstream right now. Retry shortly.",
        );
    }
  }
}

import type { Logger } from "../logger.js";
import type { LeaderFence, LeaderLease, Store } from "../store/store.js";

/**
 * Which upstream accounts this instance leads (submits and polls for), asked of the store before
 * each tick: one leader per account across instances sharing a PostgreSQL database, always this
 * one on SQLite. Shared by the submitter and the poller; says in the log when it changes. Claims
 * made as an account's leader carry its fence (fence()), so a frozen instance that resumes after
 * another took the account over claims nothing (docs/decisions/0010-leadership-and-fencing.md).
 */
export class Leadership {
  private readonly fences = new Map<string, LeaderFence>();

  /** @param as this process's lease owner id (its claim tokens' prefix) and the lease's length (LEADER_LEASE) */
  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    private readonly as: LeaderLease,
  ) {}

  async leads(account: string): Promise<boolean> {
    const fence = await this.store.ops.leads(account, this.as);
    const before = this.fences.get(account);
    if (fence) this.fences.set(account, fence);
    else this.fences.delete(account);
    if ((fence === null) !== (before === undefined)) {
      this.logger.info(
        { account, ...(fence ? { fence: fence.fence } : {}) },
        fence ? "leading upstream account: submitting and polling its tasks" : "no longer leading upstream account",
      );
    }
    return fence !== null;
  }

  /** The account's fence as of this process's last check, for claims made as its leader (none: not leading). */
  fence(account: string): LeaderFence | undefined {
    return this.fences.get(account);
  }
}

import type { Logger } from "../logger.js";
import type { LeaderFence, LeaderLease, Store } from "../store/store.js";

/** An account another instance leads is looked at again this often: this one takes over if that leader dies or freezes. */
export const LEADER_RECHECK_MS = 2_000;

/**
 * Which upstream accounts this instance leads (submits and polls for), asked of the store before
 * each tick: one leader per account across instances sharing a PostgreSQL database, always this
 * one on SQLite. Shared by the submitter and the poller; says in the log when it changes. Claims
 * made as an account's leader carry its fence (fence()), so a frozen instance that resumes after
 * another took the account over claims nothing (docs/decisions/0010-leadership-and-fencing.md).
 *
 * An account found led by another instance is watched: asked again every LEADER_RECHECK_MS, so
 * that this instance takes it over once that leader's lease lapses, even when every task of the
 * account is leased to the frozen leader (then no loop of this instance has a reason to ask).
 * Taking one over wakes the loops (`onLead`): the takeover released the old leader's leases.
 */
export class Leadership {
  private readonly fences = new Map<string, LeaderFence>();
  private readonly watched = new Set<string>();
  private timer: NodeJS.Timeout | null = null;

  /**
   * @param as this process's lease owner id (its claim tokens' prefix) and the lease's length (LEADER_LEASE)
   * @param onLead called when a watched account is taken over
   */
  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    private readonly as: LeaderLease,
    private readonly onLead: () => void = () => {},
  ) {}

  async leads(account: string): Promise<boolean> {
    const fence = await this.store.ops.leads(account, this.as);
    const before = this.fences.get(account);
    if (fence) {
      this.fences.set(account, fence);
      this.watched.delete(account);
    } else {
      this.fences.delete(account);
      this.watch(account);
    }
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

  /** Stops watching (the relay stops). */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.watched.clear();
  }

  private watch(account: string): void {
    this.watched.add(account);
    if (this.timer) return;
    this.timer = setInterval(() => void this.recheck().catch(() => {}), LEADER_RECHECK_MS);
    this.timer.unref();
  }

  private async recheck(): Promise<void> {
    let took = false;
    for (const account of [...this.watched]) if (await this.leads(account)) took = true;
    if (took) this.onLead();
  }
}

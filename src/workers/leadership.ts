import type { Logger } from "../logger.js";
import type { LeaderFence, LeaderLease, Store } from "../store/store.js";

/** An account another instance leads is looked at again this often: this one takes over if that leader dies or freezes. */
export const LEADER_RECHECK_MS = 2_000;

/**
 * What a store shared by several processes (PostgreSQL: src/db/pg/ops.ts) adds to OpsStore.leads:
 * every account's lease but the ones this process holds, in one statement, each with whether this
 * process could take it now (lapsed, or its holder's connection gone). A store without it is one
 * process's (SQLite), which leads every account.
 */
export interface TakeoverScan {
  leases(as: LeaderLease): Promise<{ account: string; takeable: boolean }[]>;
}

/**
 * Which upstream accounts this instance leads (submits and polls for), and whether its submitter
 * and poller plan at all. One leader per account across instances sharing a PostgreSQL database,
 * always this one on SQLite. Shared by the submitter and the poller; says in the log when it
 * changes. Claims made as an account's leader carry its fence (fence()), so a frozen instance that
 * resumes after another took the account over claims nothing
 * (docs/decisions/0010-leadership-and-fencing.md).
 *
 * Planning happens once per cluster, not per instance (issue #32): an instance that leads no
 * account runs none of the planning queries (which tasks to submit or poll next, counts, due
 * times, the read budget): plans() says no and its loops sleep until a takeover wakes them. It
 * only watches who leads: every LEADER_RECHECK_MS one look at every account's lease
 * (TakeoverScan), taking over any whose lease lapsed or whose leader's connection is gone; a
 * takeover wakes the loops (`onLead`), the takeover having released the old leader's leases. An
 * account known to be led by another is answered from memory (no query) until the next look.
 * An instance that knows of no leader at all (a cluster where nothing is led yet) plans, so that
 * the accounts with work are found and taken.
 */
export class Leadership {
  private readonly fences = new Map<string, LeaderFence>();
  /** Accounts another instance leads, and when (performance.now()) this one last found so. */
  private readonly others = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private readonly scan: TakeoverScan | null;
  /** The first look at the leases (with a TakeoverScan), which plans() waits for once. */
  private scanned: Promise<void> | null = null;

  /**
   * @param as this process's lease owner id (its claim tokens' prefix) and the lease's length (LEADER_LEASE)
   * @param onLead called when a watched account is taken over
   */
  constructor(
    private readonly store: Pick<Store, "ops">,
    private readonly logger: Logger,
    private readonly as: LeaderLease,
    private readonly onLead: () => void = () => {},
  ) {
    const ops = store.ops;
    this.scan = ops.leases ? { leases: (lease) => ops.leases!(lease) } : null;
  }

  /**
   * Whether this instance leads the account. An account another instance was found to lead within
   * the last LEADER_RECHECK_MS is answered from memory; the watch looks again meanwhile.
   */
  async leads(account: string): Promise<boolean> {
    const seen = this.others.get(account);
    if (seen !== undefined && performance.now() - seen < LEADER_RECHECK_MS) return false;
    return this.ask(account);
  }

  /**
   * Whether the submitter and the poller should plan (look for work at all): this instance is
   * alone on its store (SQLite), or it leads some account, or no leader is known to it (so the
   * accounts with work are found and taken). An instance that only follows plans nothing. The
   * first call looks at the leases first (one statement), and starts the watch.
   */
  async plans(): Promise<boolean> {
    if (this.scan === null) return true;
    if (!this.scanned) {
      this.scanned = this.recheck().catch(() => {});
      this.watch();
    }
    await this.scanned;
    return this.fences.size > 0 || this.others.size === 0;
  }

  /** The account's fence as of this process's last check, for claims made as its leader (none: not leading). */
  fence(account: string): LeaderFence | undefined {
    return this.fences.get(account);
  }

  /** Stops watching (the relay stops). */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.others.clear();
  }

  private async ask(account: string): Promise<boolean> {
    const fence = await this.store.ops.leads(account, this.as);
    this.learned(account, fence);
    if (!fence) this.watch();
    return fence !== null;
  }

  /** Records what the store said of the account (its fence, or led by another), and says so in the log when it changed. */
  private learned(account: string, fence: LeaderFence | null): void {
    const before = this.fences.get(account);
    if (fence) {
      this.fences.set(account, fence);
      this.others.delete(account);
    } else {
      this.fences.delete(account);
      this.others.set(account, performance.now());
    }
    if ((fence === null) !== (before === undefined)) {
      this.logger.info(
        { account, ...(fence ? { fence: fence.fence } : {}) },
        fence ? "leading upstream account: submitting and polling its tasks" : "no longer leading upstream account",
      );
    }
  }

  private watch(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.recheck().catch(() => {}), LEADER_RECHECK_MS);
    this.timer.unref();
  }

  /**
   * One look at who leads. With a TakeoverScan, one statement for every account: those this
   * process could take now are asked for (taken, unless another instance is quicker), the others
   * are known to be led elsewhere. Without one, each watched account is asked.
   */
  private async recheck(): Promise<void> {
    let took = false;
    if (this.scan) {
      for (const lease of await this.scan.leases(this.as)) {
        if (!lease.takeable) this.learned(lease.account, null);
        else if (await this.ask(lease.account)) took = true;
      }
    } else {
      for (const account of [...this.others.keys()]) if (await this.ask(account)) took = true;
    }
    if (took) this.onLead();
  }
}

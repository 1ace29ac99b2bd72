import type { Logger } from "../logger.js";
import type { Store } from "../store/store.js";

/**
 * Which upstream accounts this instance leads (submits and polls for), asked of the store before
 * each tick: one leader per account across instances sharing a PostgreSQL database, always this
 * one on SQLite. Shared by the submitter and the poller; says in the log when it changes.
 */
export class Leadership {
  private readonly leading = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
  ) {}

  async leads(account: string): Promise<boolean> {
    const leads = await this.store.ops.leads(account);
    if (leads !== this.leading.has(account)) {
      if (leads) this.leading.add(account);
      else this.leading.delete(account);
      this.logger.info({ account }, leads ? "leading upstream account: submitting and polling its tasks" : "no longer leading upstream account");
    }
    return leads;
  }
}

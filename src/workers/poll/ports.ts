import type { Clock } from "../../clock.js";
import type { Config } from "../../config.js";
import type { Lifecycle } from "../../core/lifecycle.js";
import type { PollStrategy } from "../../core/poll-plan.js";
import type { Logger } from "../../logger.js";
import type { Metrics } from "../../metrics.js";
import type { Store } from "../../store/store.js";
import type { UpstreamClient } from "../../upstream/client.js";
import type { DurationStats } from "../duration-stats.js";
import type { Leadership } from "../leadership.js";
import type { LeaseOwner } from "../owner.js";
import type { ReadBudget } from "../read-budget.js";

/** The poller's ports: only the store operations, upstream calls and verbs it uses. */
export type PollerTasks = Pick<
  Store["tasks"],
  "accountsInFlight" | "countRunning" | "listInFlight" | "claimDue" | "claimIds" | "nextDueAt"
>;
export interface PollerAccounts {
  get(account: string): Promise<Pick<UpstreamClient, "getTask" | "listTasks">>;
}
export type PollerLifecycle = Pick<Lifecycle, "recordObservation" | "release" | "retryLater" | "fail" | "failUnusable">;
export type PollerBudget = Pick<
  ReadBudget,
  "load" | "available" | "nextAvailableAt" | "take" | "pause" | "perMinute" | "windowMs" | "readsInLast"
>;

export interface PollerOptions {
  tasks: PollerTasks;
  clock: Clock;
  config: Pick<Config, "upstreamTimeoutMs">;
  logger: Logger;
  accounts: PollerAccounts;
  budget: PollerBudget;
  owner: Pick<LeaseOwner, "token">;
  lifecycle: PollerLifecycle;
  /** Which accounts this instance leads (shared with the submitter); claims carry the account's fence. */
  leadership: Pick<Leadership, "leads" | "fence" | "plans">;
  /** Learned durations (shared with the lifecycle, which records them). */
  durations: Pick<DurationStats, "expected" | "quantile">;
  metrics?: Metrics | undefined;
  /**
   * adaptive (default): list sweeps for many in-flight tasks, single reads timed by learned durations.
   * round-robin: one single read per task in turn — the naive baseline the benchmarks compare against.
   */
  strategy?: PollStrategy;
}

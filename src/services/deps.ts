import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { Logger } from "../logger.js";
import type { Lifecycle } from "../core/lifecycle.js";
import type { DatabaseHealth } from "../store/database-health.js";
import type { Store } from "../store/store.js";
import type { Nudges } from "../core/nudges.js";
import type { TaskWaiters } from "../core/task-waiters.js";
import type { StreamHub } from "../core/stream-hub.js";

/**
 * What every service verb needs; passed in, never read from globals. Every service function takes
 * it (or the part of it it uses) as its first argument: `verb(deps, ...)`, and returns a promise.
 */
export interface ServiceDeps {
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  nudges: Nudges;
  lifecycle: Lifecycle;
  /** The cached upstream catalog per account, when one was fetched (intake checks requests against it). */
  catalog?: { peek(account: string): unknown | null };
  /** Database failures seen (disk full, I/O, unreachable): /readyz and the rate-limited log read it. */
  database?: DatabaseHealth;
  /** Requests held by Prefer: wait, woken by task transitions (the relay's; without it Prefer is ignored). */
  waiters?: TaskWaiters;
  /** Open event streams, woken by task transitions as held requests are (the relay's; without it no stream routes). */
  streams?: StreamHub;
}

import type { Config } from "../config.js";
import type { Database_ } from "../db/sqlite/open.js";
import type { Store } from "../store/store.js";
import { systemClock } from "../clock.js";
import { Lifecycle } from "../core/lifecycle.js";
import { noNudges } from "../core/nudges.js";

export interface CliContext {
  config: Config;
  env: NodeJS.ProcessEnv;
  /**
   * Opens DATABASE_PATH (once; closed when the command ends). `mustExist`: a command that only reads
   * refuses to create an empty database where the operator expected theirs. `migrate: false` leaves
   * the schema as found (a backup copies exactly what is there).
   */
  open(opts?: { mustExist?: boolean; migrate?: boolean }): Database_;
  /**
   * The store every command but `db` works through: PostgreSQL when DATABASE_URL is set, else the
   * SQLite database opened as above (once; closed when the command ends).
   */
  store(opts?: { mustExist?: boolean }): Promise<Store>;
}

/** The lifecycle for the CLI's state changes (cancel, revoke): the server's workers pick its events up. */
export function cliLifecycle(store: Store, ctx: CliContext): Lifecycle {
  return new Lifecycle({
    store,
    clock: systemClock,
    nudges: noNudges,
    firstAttemptDelayMs: ctx.config.webhookRetryScheduleMs[0] ?? 0,
  });
}

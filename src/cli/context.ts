import type { Config } from "../config.js";
import type { Database_ } from "../db/open.js";

export interface CliContext {
  config: Config;
  env: NodeJS.ProcessEnv;
  /**
   * Opens DATABASE_PATH (once; closed when the command ends). `mustExist`: a command that only reads
   * refuses to create an empty database where the operator expected theirs. `migrate: false` leaves
   * the schema as found (a backup copies exactly what is there).
   */
  open(opts?: { mustExist?: boolean; migrate?: boolean }): Database_;
}

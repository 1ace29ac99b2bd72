import type { ClientRow } from "../store/rows.js";

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    client: ClientRow;
  };
}

import type { ClientRow } from "../db/clients.js";

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    client: ClientRow;
  };
}

import type { ClientRow } from "../store/store.js";

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    client: ClientRow;
  };
}

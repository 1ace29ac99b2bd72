/** Hono environment shared by the simulator's routes. */
import type { Account } from "./state.js";

export interface SimEnv {
  Variables: {
    requestId: string;
    /** Set by the auth middleware on every /openapi/v1/* route. */
    account: Account;
  };
}

import type { ClientRow } from "../store/rows.js";

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    client: ClientRow;
    /**
     * The request's JSON body as boundedBodies parsed it (undefined: not parsed there). hono keeps
     * the body's text, not its value: every c.req.json() parses the text again.
     */
    jsonBody: unknown;
  };
}

import { serve } from "@hono/node-server";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll } from "vitest";
import { createTestRelay, type TestRelay } from "./relay.js";

export interface ServedRelay {
  t: TestRelay;
  /** http://127.0.0.1:<port>, where @hono/node-server serves the relay's app. */
  origin: string;
  /** A client's key, made before serving. */
  apiKey: string;
}

/**
 * One test relay for the file (createTestRelay(env)), served by @hono/node-server on 127.0.0.1,
 * port 0, as main.ts serves it; `prepare` runs before the first request (a route it registers is
 * in the router). Its fields are set in beforeAll; closed, connections dropped, in afterAll.
 */
export function servedRelayPerFile(
  env: Record<string, string>,
  clientName: string,
  prepare: (t: TestRelay) => void = () => {},
): ServedRelay {
  const served = {} as ServedRelay;
  let server: Server;
  beforeAll(async () => {
    served.t = createTestRelay(env);
    prepare(served.t);
    served.apiKey = served.t.client(clientName).apiKey;
    server = await new Promise<Server>((resolve) => {
      const s = serve(
        { fetch: served.t.relay.app.fetch, createServer: served.t.relay.createServer, port: 0, hostname: "127.0.0.1" },
        () => resolve(s as Server),
      );
    });
    served.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await served.t.close();
  });
  return served;
}

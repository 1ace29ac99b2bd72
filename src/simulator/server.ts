import { serve } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { createSimulator } from "./app.js";
import type { SimulatorOptions } from "./options.js";
import type { SimulatorState } from "./state.js";

export interface RunningSimulator {
  url: string;
  port: number;
  state: SimulatorState;
  close(): Promise<void>;
}

/** The simulator on a real socket; port 0 (the default) picks a free one. */
export async function startSimulator(
  options: SimulatorOptions & { port?: number; host?: string } = {},
): Promise<RunningSimulator> {
  const { port = 0, host = "127.0.0.1", ...simOptions } = options;
  const { app, state } = createSimulator(simOptions);
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s as Server)) as Server;
    s.once("error", reject);
  });
  const actualPort = (server.address() as AddressInfo).port;
  const url = `http://${urlHost((server.address() as AddressInfo).address)}:${actualPort}`;
  if (options.publicBaseUrl === undefined) state.setPublicBaseUrl(url);
  return {
    url,
    port: actualPort,
    state,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Keep-alive connections would hold close() open for their idle timeout.
        server.closeAllConnections();
      }),
  };
}

/** Named from the bound address: wildcard binds are reached through loopback; IPv6 literals need brackets. */
function urlHost(address: string): string {
  if (address === "0.0.0.0" || address === "::") return "127.0.0.1";
  return address.includes(":") ? `[${address}]` : address;
}

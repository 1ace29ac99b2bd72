import type { Server, ServerResponse } from "node:http";

export interface GracefulHttp {
  /**
   * Stops accepting connections and lets requests already in flight finish. Resolves when every
   * connection is closed; at the deadline, connections still busy are closed (their requests are
   * cut off) and their count is returned.
   */
  close(deadlineMs: number): Promise<{ forced: number }>;
}

/**
 * Tracks the responses of a node http server so that shutdown neither resets a request in flight
 * nor waits on a keep-alive connection that would carry no further request: once closing, every
 * response not yet started says `Connection: close` (so Node closes its connection after sending it),
 * and connections left idle are closed as each response ends.
 */
export function gracefulHttp(server: Server): GracefulHttp {
  const active = new Set<ServerResponse>();
  let closing = false;
  server.on("request", (_req, res: ServerResponse) => {
    // A request that arrives on an existing keep-alive connection after close() is still answered.
    if (closing && !res.headersSent) res.setHeader("Connection", "close");
    active.add(res);
    res.once("close", () => {
      active.delete(res);
      if (closing) server.closeIdleConnections();
    });
  });

  return {
    async close(deadlineMs) {
      closing = true;
      for (const res of active) if (!res.headersSent) res.setHeader("Connection", "close");
      // close() stops listening and (Node ≥ 19) closes the connections idle right now.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        closed.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), deadlineMs);
        }),
      ]);
      clearTimeout(timer);
      if (!timedOut) return { forced: 0 };
      const forced = active.size;
      server.closeAllConnections();
      await closed;
      return { forced };
    },
  };
}

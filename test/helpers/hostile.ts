import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";

/**
 * Servers on loopback that misbehave the way a hostile or broken outside party does, for the
 * deadline tests (docs/contract.md, "Deadlines everywhere"): each counts what reached it and says when a
 * connection closes, so a test can wait on the event instead of sleeping.
 */

export interface Hostile {
  /** http://127.0.0.1:<port> */
  url: string;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  /**
   * Resolves once no connection is open (after at least one was accepted). A server that does not
   * read starts reading here: a paused socket never notices that its peer closed it.
   */
  allClosed(): Promise<void>;
  close(): Promise<void>;
}

function track(sockets: Set<Socket>, counts: { accepted: number }, waiters: Array<() => void>) {
  return (socket: Socket) => {
    counts.accepted++;
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => {
      sockets.delete(socket);
      if (sockets.size === 0) for (const w of waiters.splice(0)) w();
    });
  };
}

/**
 * Accepts connections and never answers. With `read` (the default) it reads and drops whatever the
 * client sends, so a request body goes through and the client waits for an answer that never
 * comes; without, it never reads either (the client's writes stall once the socket buffers fill).
 */
export async function startSilentServer(opts: { read?: boolean } = {}): Promise<Hostile> {
  const sockets = new Set<Socket>();
  const counts = { accepted: 0 };
  const waiters: Array<() => void> = [];
  const onSocket = track(sockets, counts, waiters);
  const server = createTcpServer((socket) => {
    onSocket(socket);
    if (opts.read ?? true) socket.resume();
    else socket.pause();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = hostile(
    `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sockets,
    counts,
    waiters,
    () => new Promise<void>((r) => server.close(() => r())),
  );
  return {
    ...base,
    get accepted() {
      return base.accepted;
    },
    get open() {
      return base.open;
    },
    allClosed() {
      for (const s of sockets) s.resume();
      return base.allClosed();
    },
  };
}

/**
 * Answers every request with `status` and `headers` at once, then sends the body one byte every
 * `intervalMs` (the request body is read and dropped). A declared Content-Length much larger than
 * what ever arrives keeps the client waiting for more.
 */
export async function startDripServer(opts: {
  intervalMs: number;
  status?: number;
  headers?: Record<string, string>;
}): Promise<Hostile & { bytesSent(): number }> {
  const sockets = new Set<Socket>();
  const counts = { accepted: 0 };
  const waiters: Array<() => void> = [];
  const timers = new Set<NodeJS.Timeout>();
  let sent = 0;
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    res.writeHead(opts.status ?? 200, {
      "Content-Type": "application/octet-stream",
      "Content-Length": "10000000",
      ...opts.headers,
    });
    res.flushHeaders();
    const timer = setInterval(() => {
      if (res.destroyed) return;
      res.write(Buffer.from([0x2a]));
      sent++;
    }, opts.intervalMs);
    timers.add(timer);
    res.on("close", () => {
      clearInterval(timer);
      timers.delete(timer);
    });
  });
  server.on("connection", track(sockets, counts, waiters));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = hostile(
    `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sockets,
    counts,
    waiters,
    async () => {
      for (const t of timers) clearInterval(t);
      await new Promise<void>((r) => server.close(() => r()));
    },
  );
  return Object.assign(base, { bytesSent: () => sent });
}

function hostile(
  url: string,
  sockets: Set<Socket>,
  counts: { accepted: number },
  waiters: Array<() => void>,
  stop: () => Promise<void>,
): Hostile {
  return {
    url,
    get accepted() {
      return counts.accepted;
    },
    get open() {
      return sockets.size;
    },
    allClosed() {
      if (counts.accepted > 0 && sockets.size === 0) return Promise.resolve();
      return new Promise<void>((r) => waiters.push(r));
    },
    async close() {
      for (const s of sockets) s.destroy();
      await stop();
    },
  };
}

/**
 * An upstream that answers with `total` bytes of one JSON task (status 200 unless `status`), written chunk
 * by chunk as the socket drains, so how far a reader let it get shows in `written()`; `closedEarly()` says
 * the connection closed before the end (a reader that stopped at its limit). With `contentLength`, the
 * size is declared up front.
 */
export async function startStreamingUpstream(total: number, opts: { contentLength?: boolean; status?: number } = {}) {
  let written = 0;
  let closedEarly = false;
  const chunk = Buffer.alloc(64 * 1024, "a");
  const server = createHttpServer((_req, res) => {
    res.writeHead(opts.status ?? 200, {
      "Content-Type": "application/json",
      ...(opts.contentLength ? { "Content-Length": String(total) } : {}),
    });
    const head = Buffer.from('{"data":{"id":"big","status":"succeeded"},"output":{"text":"');
    const tail = Buffer.from('"}}');
    res.write(head);
    written = head.length;
    res.on("close", () => {
      if (written < total) closedEarly = true;
    });
    const pump = () => {
      while (written + chunk.length + tail.length <= total) {
        written += chunk.length;
        if (!res.write(chunk)) return void res.once("drain", pump);
      }
      written += tail.length;
      res.end(tail);
    };
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    written: () => written,
    closedEarly: () => closedEarly,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

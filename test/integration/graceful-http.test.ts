import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { gracefulHttp } from "../../src/http/graceful.js";

/** gracefulHttp on a plain node server, driven by undici's pooled keep-alive client. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function listen(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; pool: Pool }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 2 });
  cleanups.push(() => pool.destroy());
  return { server, pool };
}

describe("gracefulHttp", () => {
  it("does not wait on an idle keep-alive connection, and answers a request in flight with Connection: close", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const inHandler = new Promise<void>((r) => (started = r));
    const { server, pool } = await listen((req, res) => {
      if (req.url === "/slow") {
        started();
        void released.then(() => res.end("slow done"));
      } else res.end("fast");
    });
    const graceful = gracefulHttp(server);

    const fast = await pool.request({ path: "/fast", method: "GET" });
    expect(fast.headers.connection).toBe("keep-alive");
    expect(await fast.body.text()).toBe("fast");

    const slow = pool.request({ path: "/slow", method: "GET" });
    await inHandler;
    const closing = graceful.close(10_000);
    release();
    const res = await slow;
    expect(res.statusCode).toBe(200);
    expect(res.headers.connection).toBe("close");
    expect(await res.body.text()).toBe("slow done");
    // Resolved by the last response ending, long before the 10 s deadline (the test would time out).
    expect(await closing).toEqual({ forced: 0 });
    expect(server.listening).toBe(false);
  });

  it("cuts off what is still running at the deadline and says how many", async () => {
    let started!: () => void;
    const inHandler = new Promise<void>((r) => (started = r));
    const { server, pool } = await listen(() => started()); // never answers
    const graceful = gracefulHttp(server);
    const hung = pool.request({ path: "/hang", method: "GET" }).then(
      () => "answered",
      (err: Error) => err.name,
    );
    await inHandler;
    expect(await graceful.close(50)).toEqual({ forced: 1 });
    expect(await hung).toBe("SocketError");
  });
});

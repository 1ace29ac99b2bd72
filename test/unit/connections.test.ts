import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ConnectionCache } from "../../src/destinations/connections.js";

/** Broker connections per client and broker (docs/destinations.md), on fake timers. */
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

function cache(idleMs = 1_000) {
  const opened: string[] = [];
  const closed: string[] = [];
  let n = 0;
  const connections = new ConnectionCache<string>({ close: (conn) => closed.push(conn), idleMs });
  const open = async () => {
    const conn = `conn-${++n}`;
    opened.push(conn);
    return conn;
  };
  const use = (key = "cli_1|amqp://broker") =>
    connections.use(key, "RabbitMQ at broker:5672", 500, open, async (c) => c);
  return { connections, opened, closed, use };
}

describe("ConnectionCache", () => {
  it("reuses one connection, and closes it once unused for idleMs after its LAST use", async () => {
    const { connections, opened, closed, use } = cache(1_000);
    expect(await use()).toBe("conn-1");
    await vi.advanceTimersByTimeAsync(600);
    expect(await use()).toBe("conn-1");
    // 1,000 ms after the first use, 400 after the last: still open.
    await vi.advanceTimersByTimeAsync(400);
    expect(closed).toEqual([]);
    expect(connections.size).toBe(1);
    await vi.advanceTimersByTimeAsync(599);
    expect(closed).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(closed).toEqual(["conn-1"]);
    expect(connections.size).toBe(0);
    // The next use opens a fresh one.
    expect(await use()).toBe("conn-2");
    expect(opened).toEqual(["conn-1", "conn-2"]);
  });

  it("keeps one idle timer per connection however many uses it has, and none while nothing is open", async () => {
    const { closed, use } = cache(1_000);
    for (let i = 0; i < 50; i++) {
      await use();
      await vi.advanceTimersByTimeAsync(10);
    }
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(closed).toEqual(["conn-1"]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("never closes a connection in use when its idle time comes; it closes idleMs after that use ends", async () => {
    const { connections, closed } = cache(1_000);
    await connections.use(
      "k",
      "b",
      500,
      async () => "conn-1",
      async (c) => c,
    );
    let finish: () => void = () => {};
    const long = connections.use(
      "k",
      "b",
      500,
      async () => "never",
      (c) =>
        new Promise<string>((resolve) => {
          finish = () => resolve(c);
        }),
    );
    await vi.advanceTimersByTimeAsync(2_000);
    expect(closed).toEqual([]);
    finish();
    expect(await long).toBe("conn-1");
    await vi.advanceTimersByTimeAsync(999);
    expect(closed).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(closed).toEqual(["conn-1"]);
  });

  it("drops the connection when a use fails: the next use opens a fresh one", async () => {
    const { connections, closed, use } = cache();
    await use();
    await expect(
      connections.use(
        "cli_1|amqp://broker",
        "b",
        500,
        async () => "x",
        async () => Promise.reject(new Error("closed")),
      ),
    ).rejects.toThrow("closed");
    await vi.advanceTimersByTimeAsync(0);
    expect(closed).toEqual(["conn-1"]);
    expect(await use()).toBe("conn-2");
  });
});

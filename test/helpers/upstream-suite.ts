import { type SetupServer, setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll } from "vitest";
import { FakeUpstream } from "./fake-upstream.js";
import { startReceiver, type Answer, type Receiver } from "./receiver.js";
import type { FakeClock } from "./fake-clock.js";
import { createTestRelay, relayDialects, type DialectRelay, type TestRelay } from "./relay.js";
import type { Dialect } from "./store-dialects.js";
import type { Logger } from "../../src/logger.js";

/** Short webhook timings so delivery tests run in milliseconds; loopback receivers allowed. */
export const WORKER_TEST_ENV = {
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  WEBHOOK_RETRY_SCHEDULE: "0s,5s,1m",
  WEBHOOK_TIMEOUT_MS: "500",
};

/** An msw server for the calling test file: listening before its tests, refusing unhandled requests, reset after each test. */
export function mswServer(): SetupServer {
  const server = setupServer();
  beforeAll(() => server.listen({ onUnhandledRequest: "error" }));
  afterEach(() => server.resetHandlers());
  afterAll(() => server.close());
  return server;
}

/**
 * Installs, for the calling test file, an msw server that refuses unhandled requests, and returns
 * `setup()` (a fresh relay + FakeUpstream per test, closed after it) and `receiver()` (a loopback
 * webhook receiver, closed after the test). `dialects` runs a suite on both databases:
 * `describe.each(dialects)(…, (_name, setup) => …)`, where `await setup()` is the same fresh relay and
 * FakeUpstream on that dialect.
 */
export function upstreamSuite(defaultEnv: Record<string, string> = WORKER_TEST_ENV) {
  const server = mswServer();

  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!();
  });
  const withUpstream = <T extends Pick<TestRelay, "clock" | "close">>(t: T) => {
    cleanups.push(() => t.close());
    const up = new FakeUpstream(t.clock);
    server.use(...up.handlers());
    return { t, up };
  };
  type SetupOn = (
    env?: Record<string, string>,
    opts?: { clock?: FakeClock; logger?: Logger },
  ) => Promise<{ t: DialectRelay; up: FakeUpstream }>;

  return {
    server,
    setup(
      env: Record<string, string> = {},
      opts: { clock?: FakeClock; logger?: Logger } = {},
    ): { t: TestRelay; up: FakeUpstream } {
      return withUpstream(createTestRelay({ ...defaultEnv, ...env }, opts));
    },
    dialects: relayDialects().map(([dialect, open]): [Dialect, SetupOn] => [
      dialect,
      async (env = {}, opts = {}) => withUpstream(await open({ ...defaultEnv, ...env }, opts)),
    ]),
    /** Runs `fn` after the current test (last registered, first run). */
    cleanup(fn: () => Promise<void>): void {
      cleanups.push(fn);
    },
    async receiver(fallback?: Answer): Promise<Receiver> {
      const r = await startReceiver(fallback);
      cleanups.push(() => r.close());
      return r;
    },
  };
}

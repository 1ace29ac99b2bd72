import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll } from "vitest";
import { FakeUpstream } from "./fake-upstream.js";
import { startReceiver, type Answer, type Receiver } from "./receiver.js";
import type { FakeClock } from "./fake-clock.js";
import { createTestRelay, type TestRelay } from "./relay.js";
import type { Logger } from "../../src/logger.js";

/** Short webhook timings so delivery tests run in milliseconds; loopback receivers allowed. */
export const WORKER_TEST_ENV = {
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  WEBHOOK_RETRY_SCHEDULE: "0s,5s,1m",
  WEBHOOK_TIMEOUT_MS: "500",
};

/**
 * Installs, for the calling test file, an msw server that refuses unhandled requests, and returns
 * `setup()` (a fresh relay + FakeUpstream per test, closed after it) and `receiver()` (a loopback
 * webhook receiver, closed after the test).
 */
export function upstreamSuite(defaultEnv: Record<string, string> = WORKER_TEST_ENV) {
  const server = setupServer();
  beforeAll(() => server.listen({ onUnhandledRequest: "error" }));
  afterEach(() => server.resetHandlers());
  afterAll(() => server.close());

  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!();
  });

  return {
    server,
    setup(
      env: Record<string, string> = {},
      opts: { clock?: FakeClock; logger?: Logger } = {},
    ): { t: TestRelay; up: FakeUpstream } {
      const t = createTestRelay({ ...defaultEnv, ...env }, opts);
      cleanups.push(() => t.close());
      const up = new FakeUpstream(t.clock);
      server.use(...up.handlers());
      return { t, up };
    },
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

import { fetch as undiciFetch } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { UpstreamClient } from "../../src/upstream/client.js";
import { upstreamFailure as failure } from "../helpers/upstream-failure.js";
import { startDripServer } from "../helpers/hostile.js";

/**
 * The upstream client's deadlines (docs/contract.md, "Deadlines everywhere"): one total deadline
 * for the exchange, driven by timers a test can fake, and a minimum rate for the answer's body, so
 * an upstream that drips its answer frees the submitter's or poller's slot long before the total.
 */
// msw patches the global fetch; undici's own goes to the loopback server for real.
const realFetch = undiciFetch as unknown as typeof fetch;

describe("an upstream that answers, then drips its body", () => {
  let drip: Awaited<ReturnType<typeof startDripServer>>;
  beforeAll(async () => {
    drip = await startDripServer({
      intervalMs: 50,
      headers: { "Content-Type": "application/json", "Content-Length": "4096" },
    });
  });
  afterAll(async () => {
    await drip.close();
  });

  it("ends as a retryable timeout once the body moves below the minimum rate, well before the total deadline", async () => {
    const client = new UpstreamClient({
      baseUrl: drip.url,
      apiKey: "k",
      fetch: realFetch,
      timeoutMs: 10_000,
      minBodyRate: { bytes: 1024, windowMs: 400 },
    });
    const started = performance.now();
    const e = await failure(client.getTask("dripping"));
    const ms = performance.now() - started;
    expect(e).toMatchObject({ kind: "timeout", code: "timeout", retryable: true });
    expect(e.message).toMatch(
      /^GET \/openapi\/v1\/tasks\/dripping timed out: the answer to GET \/openapi\/v1\/tasks\/dripping moved \d+ bytes in \d+ ms, below the minimum of 1024 bytes per 400 ms$/,
    );
    expect(ms).toBeGreaterThanOrEqual(390);
    expect(ms).toBeLessThan(2_500);
    await drip.allClosed();
  });
});

describe("the total deadline runs on timers a test controls", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a call that never settles ends at timeoutMs of fake time, and leaves no timer behind", async () => {
    vi.useFakeTimers();
    const hanging: typeof fetch = () => new Promise<Response>(() => undefined);
    const client = new UpstreamClient({
      baseUrl: "https://upstream.test",
      apiKey: "k",
      fetch: hanging,
      timeoutMs: 30_000,
    });
    const call = failure(client.getModels());
    await vi.advanceTimersByTimeAsync(29_999);
    let settled = false;
    void call.then(() => (settled = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await call).toMatchObject({
      kind: "timeout",
      code: "timeout",
      retryable: true,
      message: "GET /openapi/v1/models timed out after 30000 ms",
    });
    expect(vi.getTimerCount()).toBe(0);
  });
});

import { afterEach, describe, expect, it, vi } from "vitest";
import { CHANNEL } from "../../src/db/pg/mapping.js";
import { createClient } from "../../src/services/clients.js";
import { createVia, startPair } from "../helpers/pg-relays.js";

/**
 * Issue #43: a creation on an instance that does not lead its account wakes the leader's submitter by
 * a NOTIFY naming the account (`created:<account>`), so the leader lets it pass while the account is
 * full, as a creation on the leader itself does (Nudges.created): a creation cannot free a slot, a task
 * ending wakes the submitter anyway, and three instances' creations made the leader tick for nothing.
 * A creation with a deadline wakes it still (its expiry must be watched).
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("creations on another instance while the leader's account is full (PostgreSQL)", () => {
  it("do not wake the leader's submitter; one with a deadline does", async () => {
    const { a, b, clock } = await startPair(cleanups, { UPSTREAM_MAX_CONCURRENT: "1" });
    await a.relay.listen();
    await b.relay.listen();
    const { apiKey } = await createClient({ store: a.store, clock }, { name: "full" });
    // A leads the account, sends the first task and finds the account full with the second.
    await createVia(a, apiKey, 1, "http://127.0.0.1:9/hook", "full-wake");
    await a.relay.submitter.runOnce();
    await createVia(a, apiKey, 2, "http://127.0.0.1:9/hook", "full-wake");
    await a.relay.submitter.runOnce();
    expect(a.relay.submitter.isFull("default")).toBe(true);

    const nudge = vi.spyOn(a.relay.loopsByName.submitter, "nudge");
    for (let n = 3; n < 8; n++) await createVia(b, apiKey, n, "http://127.0.0.1:9/hook", "full-wake");
    // A marker after them (notifications arrive in commit order): once A is nudged by it, it heard theirs.
    await b.store.pool.query("SELECT pg_notify($1, 'submitter')", [CHANNEL]);
    await vi.waitFor(() => expect(nudge).toHaveBeenCalled(), { timeout: 5_000, interval: 5 });
    expect(nudge).toHaveBeenCalledTimes(1);

    const res = await b.relay.app.request("http://relay.test/openapi/v1/images/generations", {
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "idempotency-key": "full-wake-deadline",
      },
      body: JSON.stringify({ model: "p-image", mode: "generate", prompt: "due", count: 1, expires_after_seconds: 600 }),
    });
    expect(res.status).toBe(201);
    await vi.waitFor(() => expect(nudge).toHaveBeenCalledTimes(2), { timeout: 5_000, interval: 5 });
  });
});

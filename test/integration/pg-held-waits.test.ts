import { afterEach, describe, expect, it, vi } from "vitest";
import { HELD_WAITS_PER_CLIENT, type Relay } from "../../src/relay.js";
import { createClient } from "../../src/services/clients.js";
import { STREAM_PLACE_MS, STREAMS_PER_CLIENT } from "../../src/services/streams.js";
import { HELD_PLACE_MS } from "../../src/services/task-wait.js";
import { expectTooManyStreams, SseReader } from "../helpers/sse.js";
import { callAs, crash, createVia, startPair } from "../helpers/pg-relays.js";

/**
 * Issue #38 item 6: the bound on requests held with Prefer: wait (20 per API key) is counted in the
 * database, so two relays on one PostgreSQL allow what one does: the 21st held wait of a key on the
 * second instance is refused as the contract says, a wait that answered gives its place back, and
 * the places of an instance killed while holding them stop counting after HELD_PLACE_MS.
 */

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Resolves once `n` requests are held on the task here (a typed condition, not a sleep). */
const heldOn = (r: Relay, id: string, n: number) =>
  vi.waitFor(() => expect(r.waiters.watchers(id)).toBe(n), { timeout: 10_000, interval: 5 });

const REFUSED = {
  error: {
    code: "rate_limit",
    message: `This API key already holds ${HELD_WAITS_PER_CLIENT} requests waiting with Prefer: wait; retry once one has answered, or poll without it.`,
    request_id: expect.stringMatching(/^req_/),
  },
};

describe("held waits on two instances of one PostgreSQL", () => {
  it("the 21st held wait of a key on the other instance is 429; an answered wait, or a killed instance's after HELD_PLACE_MS, frees its place", async () => {
    const { a, b, clock } = await startPair(cleanups);
    await a.relay.listen();
    await b.relay.listen();
    const { apiKey } = await createClient({ store: a.store, clock }, { name: "waiter" });
    const call = callAs(apiKey);
    const first = await createVia(a, apiKey, 1, "http://127.0.0.1:9/hook", "held-wait");
    const second = await createVia(a, apiKey, 2, "http://127.0.0.1:9/hook", "held-wait");
    const wait = (i: typeof a, id: string) =>
      call(i, `/openapi/v1/tasks/${id}?status=queued`, { headers: { Prefer: "wait=60" } });

    // Twenty held on A, on the first task.
    const held = Array.from({ length: HELD_WAITS_PER_CLIENT }, () => wait(a, first));
    await heldOn(a.relay, first, HELD_WAITS_PER_CLIENT);
    // B holds none itself, but the key's bound counts A's: its 21st is refused.
    const refused = await wait(b, second);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await refused.json()).toEqual(REFUSED);
    expect(b.relay.waiters.size).toBe(0);

    // Canceled through B: A's held waits answer (A hears it through LISTEN) and give their places back.
    expect((await call(b, `/openapi/v1/tasks/${first}/cancel`, { method: "POST" })).status).toBe(200);
    for (const res of await Promise.all(held)) expect(res.status).toBe(200);
    const onB = Array.from({ length: HELD_WAITS_PER_CLIENT }, () => wait(b, second));
    await heldOn(b.relay, second, HELD_WAITS_PER_CLIENT);
    expect((await wait(a, second)).status).toBe(429);
    expect((await call(a, `/openapi/v1/tasks/${second}/cancel`, { method: "POST" })).status).toBe(200);
    for (const res of await Promise.all(onB)) expect(res.status).toBe(200);

    // A dies (kill -9) holding twenty: its places count until HELD_PLACE_MS has passed, then not.
    const third = await createVia(b, apiKey, 3, "http://127.0.0.1:9/hook", "held-wait");
    const orphaned = Array.from({ length: HELD_WAITS_PER_CLIENT }, () => wait(a, third).catch(() => null));
    await heldOn(a.relay, third, HELD_WAITS_PER_CLIENT);
    await crash(a);
    void Promise.all(orphaned);
    expect((await wait(b, third)).status).toBe(429);
    clock.advance(HELD_PLACE_MS - 1);
    expect((await wait(b, third)).status).toBe(429);
    clock.advance(1);
    const after = wait(b, third);
    await heldOn(b.relay, third, 1);
    expect((await call(b, `/openapi/v1/tasks/${third}/cancel`, { method: "POST" })).status).toBe(200);
    expect((await after).status).toBe(200);
  }, 60_000);

  it("the 51st open stream of a key on the other instance is 429; a closed stream, or a killed instance's after STREAM_PLACE_MS, frees its place", async () => {
    const { a, b, clock } = await startPair(cleanups);
    const { apiKey } = await createClient({ store: a.store, clock }, { name: "streamer" });
    const call = callAs(apiKey);
    const readers: SseReader[] = [];
    cleanups.push(async () => {
      for (const r of readers) await r.cancel().catch(() => {});
    });
    const open = async (i: typeof a) => {
      const res = await call(i, "/openapi/v1/events/stream");
      if (res.status === 200) readers.push(new SseReader(res));
      return res;
    };
    for (let n = 0; n < STREAMS_PER_CLIENT; n++) expect((await open(a)).status).toBe(200);
    const refused = await open(b);
    await expectTooManyStreams(refused);
    expect(b.relay.streams.size).toBe(0);

    // One of A's closed: its place is given back, and B may open one.
    await readers.shift()!.cancel();
    await vi.waitFor(async () => expect((await open(b)).status).toBe(200), { timeout: 10_000, interval: 20 });
    expect((await open(a)).status).toBe(429);

    // A dies (kill -9) with 49 open: their places count until STREAM_PLACE_MS without a heartbeat.
    await crash(a);
    expect((await open(b)).status).toBe(429);
    clock.advance(STREAM_PLACE_MS);
    expect((await open(b)).status).toBe(200);
  }, 60_000);
});

import { http } from "msw";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createClient } from "../../src/services/clients.js";
import { createSimulator } from "../../src/simulator/app.js";
import { HELD_WAITS_PER_CLIENT, type Relay } from "../../src/relay.js";
import { callAs, startPair } from "../helpers/pg-relays.js";
import { createTestRelay, imageBody, UPSTREAM_KEY, UPSTREAM_URL, type TestRelay } from "../helpers/relay.js";
import { mswServer } from "../helpers/upstream-suite.js";

/**
 * Prefer: wait (docs/contract.md, "Waiting for the result"): held requests are woken by the task's
 * own transition — a cancel here, another instance's on PostgreSQL — and answer as without it.
 */
const server = mswServer();

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const requestId = expect.stringMatching(/^req_/);

function relay(): TestRelay {
  const t = createTestRelay();
  cleanups.push(() => t.close());
  return t;
}

async function createTask(t: TestRelay, apiKey: string, headers: Record<string, string> = {}): Promise<Response> {
  return t.request(apiKey, "/openapi/v1/images/generations", {
    method: "POST",
    json: imageBody(),
    idempotencyKey: `wait-${Math.random().toString(36).slice(2, 12)}`,
    headers,
  });
}

async function newTaskId(t: TestRelay, apiKey: string): Promise<string> {
  const res = await createTask(t, apiKey);
  expect(res.status).toBe(201);
  return ((await res.json()) as Json).data.id as string;
}

const read = (t: TestRelay, apiKey: string, id: string, prefer: string | null, status?: string) =>
  t.request(apiKey, `/openapi/v1/tasks/${id}${status ? `?status=${status}` : ""}`, {
    headers: prefer === null ? {} : { Prefer: prefer },
  });

/** Resolves once `n` requests are held on the task (a typed condition, not a sleep). */
const heldOn = (r: Relay, id: string, n = 1) =>
  vi.waitFor(() => expect(r.waiters.watchers(id)).toBe(n), { timeout: 4_000, interval: 2 });

/** The id of the client's newest task, once a creation holding on it waits. */
async function heldCreation(t: TestRelay, apiKey: string): Promise<string> {
  let id = "";
  await vi.waitFor(
    async () => {
      const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as Json;
      id = list.data[0]?.id ?? "";
      expect(t.relay.waiters.watchers(id)).toBe(1);
    },
    { timeout: 4_000, interval: 2 },
  );
  return id;
}

describe("Prefer: wait on creation", () => {
  it("a task the upstream finishes within N: one creation answers succeeded (simulator, workers on the fake clock)", async () => {
    const t = relay();
    const { app } = createSimulator({
      clock: t.clock,
      accounts: [{ apiKey: UPSTREAM_KEY, maxConcurrent: 100, readsPerMinute: 0, balance: 1_000_000 }],
    });
    server.use(http.all(`${UPSTREAM_URL}/*`, ({ request }) => app.fetch(request)));
    const { apiKey } = t.client();
    const pending = createTask(t, apiKey, { Prefer: "wait=30" });
    const id = await heldCreation(t, apiKey);
    for (let i = 0; i < 100 && t.relay.waiters.size > 0; i++) {
      await t.relay.submitter.runOnce();
      t.clock.advance(2_000);
      await t.relay.poller.runOnce();
    }
    const res = await pending;
    expect(res.status).toBe(201);
    expect(res.headers.get("preference-applied")).toBe("wait=30");
    const body = (await res.json()) as Json;
    expect(body.data).toMatchObject({ id, status: "succeeded" });
    expect(body.output).not.toBeNull();
  });

  it("answers once the task ends within N, in one request, with Preference-Applied", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const started = Date.now();
    const pending = createTask(t, apiKey, { Prefer: "wait=30" });
    const id = await heldCreation(t, apiKey);
    expect((await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
    const res = await pending;
    expect(res.status).toBe(201);
    expect(res.headers.get("preference-applied")).toBe("wait=30");
    expect(res.headers.get("location")).toBe(`http://relay.test/openapi/v1/tasks/${id}`);
    expect(((await res.json()) as Json).data.status).toBe("canceled");
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(t.relay.waiters.size).toBe(0);
  });

  it("answers at N with the task's current state when it does not end, same status code and body", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const started = Date.now();
    const res = await createTask(t, apiKey, { Prefer: "respond-async, wait=1" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(990);
    expect(res.status).toBe(201);
    expect(res.headers.get("preference-applied")).toBe("wait=1");
    const body = (await res.json()) as Json;
    expect(body.data.status).toBe("queued");
    const plain = (await (await read(t, apiKey, body.data.id, null)).json()) as Json;
    expect(body).toEqual(plain);
  });
});

describe("Prefer: wait on a task read", () => {
  it("with ?status=queued answers as soon as the status changes", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    const started = Date.now();
    const pending = read(t, apiKey, id, "wait=30", "queued");
    await heldOn(t.relay, id);
    await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    const res = await pending;
    expect(res.status).toBe(200);
    expect(res.headers.get("preference-applied")).toBe("wait=30");
    expect(((await res.json()) as Json).data.status).toBe("canceled");
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("answers at once when the status already differs from ?status=, and at N when nothing changes", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    const differs = await read(t, apiKey, id, "wait=30", "processing");
    expect(differs.headers.get("preference-applied")).toBe("wait=30");
    expect(((await differs.json()) as Json).data.status).toBe("queued");
    const started = Date.now();
    const timedOut = await read(t, apiKey, id, "wait=1", "queued");
    expect(Date.now() - started).toBeGreaterThanOrEqual(990);
    expect(timedOut.status).toBe(200);
    expect(timedOut.headers.get("preference-applied")).toBe("wait=1");
    expect(((await timedOut.json()) as Json).data.status).toBe("queued");
  });

  it("a wait over the cap (wait=999) is held up to 60 s and answered with Preference-Applied: wait=60", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    const pending = read(t, apiKey, id, "wait=999", "queued");
    await heldOn(t.relay, id);
    await t.request(apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    const res = await pending;
    expect(res.status).toBe(200);
    expect(res.headers.get("preference-applied")).toBe("wait=60");
    expect(((await res.json()) as Json).data.status).toBe("canceled");
  });

  it("ignores a Prefer it cannot honour (RFC 7240): no wait, no Preference-Applied", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    for (const prefer of ["wait=0", "wait=abc", "wait", "wait=1.5", "handling=strict"]) {
      const res = await read(t, apiKey, id, prefer, "queued");
      expect(res.status, prefer).toBe(200);
      expect(res.headers.get("preference-applied"), prefer).toBeNull();
    }
    expect(t.relay.waiters.size).toBe(0);
    const honoured = await read(t, apiKey, id, "WAIT=1; x=y", "processing");
    expect(honoured.headers.get("preference-applied")).toBe("wait=1");
  });

  it("holds a bounded number per client: one more gets 429 rate_limit, another client's wait still works", async () => {
    const t = relay();
    const flooder = t.client("flooder");
    const other = t.client("other");
    const id = await newTaskId(t, flooder.apiKey);
    const held = Array.from({ length: HELD_WAITS_PER_CLIENT }, () => read(t, flooder.apiKey, id, "wait=60", "queued"));
    await heldOn(t.relay, id, HELD_WAITS_PER_CLIENT);
    const refused = await read(t, flooder.apiKey, id, "wait=60", "queued");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await refused.json()).toEqual({
      error: { code: "rate_limit", message: expect.stringContaining("Prefer: wait"), request_id: requestId },
    });
    const creation = await createTask(t, flooder.apiKey, { Prefer: "wait=5" });
    expect(creation.status).toBe(429);
    expect(((await (await t.request(flooder.apiKey, "/openapi/v1/tasks")).json()) as Json).data).toHaveLength(1);

    const otherId = await newTaskId(t, other.apiKey);
    const pending = read(t, other.apiKey, otherId, "wait=30", "queued");
    await heldOn(t.relay, otherId);
    await t.request(other.apiKey, `/openapi/v1/tasks/${otherId}/cancel`, { method: "POST" });
    expect(((await (await pending).json()) as Json).data.status).toBe("canceled");

    // Ending the flooder's task answers all its held requests, and frees its slots.
    await t.request(flooder.apiKey, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" });
    for (const res of await Promise.all(held)) expect(((await res.json()) as Json).data.status).toBe("canceled");
    expect(t.relay.waiters.size).toBe(0);
    expect((await read(t, flooder.apiKey, id, "wait=1", "queued")).status).toBe(200);
  });

  it("a caller that goes away gives its slot back at once", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    const gone = new AbortController();
    const held = Array.from({ length: HELD_WAITS_PER_CLIENT }, () =>
      t.request(apiKey, `/openapi/v1/tasks/${id}?status=queued`, {
        headers: { Prefer: "wait=60" },
        signal: gone.signal,
      }),
    );
    await heldOn(t.relay, id, HELD_WAITS_PER_CLIENT);
    gone.abort();
    await Promise.allSettled(held);
    await vi.waitFor(() => expect(t.relay.waiters.size).toBe(0), { timeout: 2_000, interval: 2 });
    const again = await read(t, apiKey, id, "wait=1", "processing");
    expect(again.status).toBe(200);
    expect(again.headers.get("preference-applied")).toBe("wait=1");
  });

  it("stop() releases held requests at once with the task's current state", async () => {
    const t = relay();
    const { apiKey } = t.client();
    const id = await newTaskId(t, apiKey);
    const held = [read(t, apiKey, id, "wait=60", "queued"), read(t, apiKey, id, "wait=60")];
    const creation = createTask(t, apiKey, { Prefer: "wait=60" });
    await heldOn(t.relay, id, 2);
    await vi.waitFor(() => expect(t.relay.waiters.size).toBe(3), { timeout: 4_000, interval: 2 });
    const started = Date.now();
    await t.relay.stop(1_000);
    for (const res of [...(await Promise.all(held)), await creation]) {
      expect(res.headers.get("preference-applied")).toBe("wait=60");
      expect(((await res.json()) as Json).data.status).toBe("queued");
    }
    expect(Date.now() - started).toBeLessThan(2_000);
    // While stopping, a new wait answers at once.
    expect((await read(t, apiKey, id, "wait=60", "queued")).headers.get("preference-applied")).toBe("wait=60");
  });
});

describe("Prefer: wait on PostgreSQL", () => {
  it("a task transitioned by another instance wakes the request held here (LISTEN/NOTIFY)", async () => {
    const { a, b, clock } = await startPair(cleanups);
    await a.relay.listen();
    const { apiKey } = await createClient({ store: a.store, clock }, { name: "pg-wait" });
    const call = callAs(apiKey);
    const created = await call(a, "/openapi/v1/images/generations", {
      method: "POST",
      headers: { "idempotency-key": "pg-wait-1" },
      body: JSON.stringify(imageBody()),
    });
    const id = ((await created.json()) as Json).data.id as string;
    const started = Date.now();
    const pending = call(a, `/openapi/v1/tasks/${id}?status=queued`, { headers: { Prefer: "wait=30" } });
    await heldOn(a.relay, id);
    expect((await call(b, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
    const res = await pending;
    expect(res.headers.get("preference-applied")).toBe("wait=30");
    expect(((await res.json()) as Json).data.status).toBe("canceled");
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("transitions while the LISTEN session is lost are seen once it is back: each held wait answers within 2 s", async () => {
    const { a, b, clock } = await startPair(cleanups);
    await a.relay.listen();
    let resyncs = 0;
    a.relay.waiters.onResync(() => resyncs++);
    const { apiKey } = await createClient({ store: a.store, clock }, { name: "pg-wait-gap" });
    const call = callAs(apiKey);
    const ids: string[] = [];
    for (let n = 0; n < 6; n++) {
      const created = await call(a, "/openapi/v1/images/generations", {
        method: "POST",
        headers: { "idempotency-key": `pg-wait-gap-${n}` },
        body: JSON.stringify(imageBody()),
      });
      ids.push(((await created.json()) as Json).data.id as string);
    }
    const answered = ids.map((id) =>
      call(a, `/openapi/v1/tasks/${id}?status=queued`, { headers: { Prefer: "wait=8" } }).then(async (res) => ({
        at: Date.now(),
        status: ((await res.json()) as Json).data.status as string,
      })),
    );
    for (const id of ids) await heldOn(a.relay, id);
    // The LISTEN session dies on the server's side; the instance notices, and listens again 1 s later.
    const listener = a.store.listener!;
    await b.store.q("SELECT pg_terminate_backend($1)", [(listener as unknown as { processID: number }).processID]);
    await vi.waitFor(() => expect(a.store.listener).not.toBe(listener), { timeout: 4_000, interval: 2 });
    const canceledAt: number[] = [];
    for (const id of ids) {
      expect((await call(b, `/openapi/v1/tasks/${id}/cancel`, { method: "POST" })).status).toBe(200);
      canceledAt.push(Date.now());
    }
    const results = await Promise.all(answered);
    expect(results.map((r) => r.status)).toEqual(ids.map(() => "canceled"));
    for (const [n, r] of results.entries()) expect(r.at - canceledAt[n]!).toBeLessThan(2_000);
    expect(resyncs).toBe(1);
  });
});

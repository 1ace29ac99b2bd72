import pg from "pg";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CHANNEL } from "../../src/db/pg/mapping.js";
import { NOTIFY_IF_WATCHED, TASK_FOR_CHANGE } from "../../src/db/pg/watch-barrier.js";
import type { Relay } from "../../src/relay.js";
import { createClient } from "../../src/services/clients.js";
import { callAs, createVia, startInstances } from "../helpers/pg-relays.js";

/**
 * Issue #43: a task's change is told to other instances (NOTIFY, with the cluster-wide notify lock
 * at commit) only when a watcher may want it, and a watcher that appears while a change commits is
 * still woken (src/db/pg/watch-barrier.ts).
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup() {
  const { db, clock, instances, stop } = await startInstances(2);
  cleanups.push(stop);
  const [a, b] = instances as [(typeof instances)[0], (typeof instances)[0]];
  await a.relay.listen();
  await b.relay.listen();
  const { client, apiKey } = await createClient({ store: a.store, clock }, { name: "watched" });
  const session = async () => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    cleanups.push(() => c.end());
    return c;
  };
  return { a, b, clientId: client.id, apiKey, call: callAs(apiKey), session };
}

/** Resolves once `n` requests are held on the task here (a typed condition, not a sleep). */
const heldOn = (r: Relay, id: string, n: number) =>
  vi.waitFor(() => expect(r.waiters.watchers(id)).toBe(n), { timeout: 10_000, interval: 5 });

describe("NOTIFY only where someone listens", () => {
  it("a change of a task no one watches sends no NOTIFY; one its client holds a wait on does", async () => {
    const { a, b, apiKey, call, session } = await setup();
    const listener = await session();
    const heard: string[] = [];
    listener.on("notification", (n) => heard.push(n.payload ?? ""));
    await listener.query(`LISTEN ${CHANNEL}`);
    // Notifications arrive in commit order: once this one is heard, every earlier one was.
    let fences = 0;
    const fence = async () => {
      const payload = `fence ${++fences}`;
      await listener.query("SELECT pg_notify($1, $2)", [CHANNEL, payload]);
      await vi.waitFor(() => expect(heard).toContain(payload), { timeout: 5_000, interval: 5 });
    };

    const quiet = await createVia(a, apiKey, 1, "http://127.0.0.1:9/hook", "quiet-task");
    expect((await call(b, `/openapi/v1/tasks/${quiet}/cancel`, { method: "POST" })).status).toBe(200);
    await fence();
    expect(heard.filter((p) => p.startsWith("task:"))).toEqual([]);

    const watched = await createVia(a, apiKey, 2, "http://127.0.0.1:9/hook", "quiet-task");
    const held = call(a, `/openapi/v1/tasks/${watched}?status=queued`, { headers: { Prefer: "wait=30" } });
    await heldOn(a.relay, watched, 1);
    expect((await call(b, `/openapi/v1/tasks/${watched}/cancel`, { method: "POST" })).status).toBe(200);
    const answer = await held;
    expect(answer.status).toBe(200);
    expect(await answer.json()).toMatchObject({ data: { status: "canceled" } });
    await fence();
    expect(heard.filter((p) => p.startsWith("task:")).map((p) => p.split(" ")[0])).toEqual([`task:${watched}`]);
  }, 60_000);

  it("a wait that starts while a change is committing (its no-NOTIFY decided) still answers with the change", async () => {
    const { a, b, clientId, apiKey, call, session } = await setup();
    const id = await createVia(a, apiKey, 1, "http://127.0.0.1:9/hook", "racing");
    // A change in flight: its task row locked (with the shared watch locks), no one watching yet.
    const change = await session();
    await change.query("BEGIN");
    expect((await change.query(`${TASK_FOR_CHANGE} FOR UPDATE OF t`, [id])).rows).toHaveLength(1);
    expect((await change.query(NOTIFY_IF_WATCHED, [CHANNEL, `task:${id}`, clientId])).rows).toEqual([]);
    // A wait starts on the other instance: its place commits, then it waits for the change to end.
    const held = call(b, `/openapi/v1/tasks/${id}?status=queued`, { headers: { Prefer: "wait=30" } });
    const observer = await session();
    await vi.waitFor(
      async () =>
        expect(
          (await observer.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))
            .rows[0].n,
        ).toBe(1),
      { timeout: 10_000, interval: 10 },
    );
    await change.query("UPDATE tasks SET status = 'canceled', phase = 'done' WHERE id = $1", [id]);
    await change.query("COMMIT");
    const answer = await held;
    expect(answer.status).toBe(200);
    expect(await answer.json()).toMatchObject({ data: { status: "canceled" } });
    expect(b.relay.waiters.size).toBe(0);
  }, 60_000);
});

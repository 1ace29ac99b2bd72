import { describe, expect, it } from "vitest";
import { PgStore } from "../../src/db/pg/store.js";
import { foldStoredBytesLog } from "../../src/db/pg/stored-bytes-log.js";
import { SqliteStore } from "../../src/db/sqlite/store.js";
import type { Store } from "../../src/store/store.js";
import { attemptOf, claimEvents, client, conformance, fresh, NOW, opts, task } from "../helpers/conformance.js";

/**
 * What is stored is what is counted (issue #38 item 3), on both drivers: a client's stored bytes
 * are its tasks' requests plus everything written for it afterwards — the event row of every
 * destination (20 endpoints: 21 rows per event), every attempt's stored answer, outputs and files —
 * and come off again when retention prunes. Each figure is checked against the rows themselves,
 * measured by SQL here, independently of the driver's counting.
 */
const suite = conformance();

/** UTF-8 bytes of what the client's rows hold, summed over the rows by SQL. */
async function bytesInRows(store: Store, clientId: string): Promise<number> {
  if (store instanceof SqliteStore) {
    const b = (col: string) => `coalesce(length(CAST(${col} AS BLOB)), 0)`;
    const row = store.database.sqlite
      .prepare(
        `SELECT
           (SELECT coalesce(sum(stored_bytes + ${b("output_json")} + ${b("error_json")} + ${b("files_json")}), 0) FROM tasks WHERE client_id = ?)
         + (SELECT coalesce(sum(${b("payload")} + ${b("callback_url")} + ${b("callback_headers")}), 0) FROM events WHERE client_id = ?)
         + (SELECT coalesce(sum(${b("url")} + ${b("error")} + ${b("response_body")}), 0) FROM delivery_attempts WHERE client_id = ?) AS n`,
      )
      .get(clientId, clientId, clientId) as { n: number };
    return row.n;
  }
  const b = (col: string) => `coalesce(octet_length(${col}), 0)`;
  const r = await (store as PgStore).pool.query(
    `SELECT
       (SELECT coalesce(sum(stored_bytes + ${b("output_json")} + ${b("error_json")} + ${b("files_json")}), 0) FROM tasks WHERE client_id = $1)
     + (SELECT coalesce(sum(${b("payload")} + ${b("callback_url")} + ${b("callback_headers")}), 0) FROM events WHERE client_id = $1)
     + (SELECT coalesce(sum(${b("url")} + ${b("error")} + ${b("response_body")}), 0) FROM delivery_attempts WHERE client_id = $1) AS n`,
    [clientId],
  );
  return Number(r.rows[0].n);
}

let n = 0;
function endpointRow(clientId: string) {
  const host = fresh("ep.example");
  return {
    id: `ep_sb_${String(n++).padStart(6, "0")}${process.pid}`,
    clientId,
    url: `https://${host}/hook`,
    destinationHost: `${host}:443`,
    events: JSON.stringify(["task.succeeded", "task.failed"]),
    description: "a subscribed endpoint",
    headers: "sealed-endpoint-headers",
    createdAt: NOW + n,
  };
}

/** A receiver's answer as an attempt stores it: 4 KiB of multibyte text (1,366 characters). */
const ANSWER = `${"漢".repeat(1_365)}x`;

describe.each(suite.dialects)("stored bytes count what is written for the client, on %s", (_name, h) => {
  it("20 endpoints, outputs and two rounds of failing attempts, written concurrently: the count equals the rows' bytes, and pruning takes it all off", async () => {
    const { store } = await h.fresh();
    const c = await client(store);
    const other = await client(store);
    for (let i = 0; i < 20; i++) expect(await store.webhookEndpoints.create(endpointRow(c.id), 20)).not.toBeNull();
    const output = JSON.stringify({ images: [{ url: `https://cdn.example.com/${"é".repeat(3_000)}.png` }] });
    // Five tasks at once, each succeeding with its output (one event to its callback and to each endpoint).
    const created = await Promise.all(
      Array.from({ length: 5 }, () =>
        store.tasks.create(task(c.id, fresh("t"), { callbackUrl: "https://hooks.example/cb" })),
      ),
    );
    await store.tasks.create(task(other.id, fresh("o")));
    const requests = created.reduce((sum, r) => sum + r.task.storedBytes, 0);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(requests);
    await Promise.all(
      created.map(({ task: t }) =>
        store.tasks.transition(
          t,
          { status: "succeeded", phase: "done", outputJson: output, filesJson: '[{"key":"a.png"}]', completedAt: NOW },
          opts(),
        ),
      ),
    );
    expect((await store.events.ofTask(created[0]!.task.id)).length).toBe(21);
    // Two rounds of failing attempts on every destination, recorded concurrently.
    for (const round of [1, 2]) {
      const claimed = await claimEvents(store, `tok${round}`, { limit: 500 });
      expect(claimed).toHaveLength(5 * 21);
      await Promise.all(
        claimed.map((e) =>
          store.events.recordAttempt(e.id, `tok${round}`, attemptOf(e, 500, { responseBody: ANSWER }), {
            attempts: round,
            nextAttemptAt: NOW,
            lastStatusCode: 500,
          }),
        ),
      );
    }
    const held = await bytesInRows(store, c.id);
    // The outputs, 105 event rows and 210 answers of 4 KiB: far more than the requests alone.
    expect(held).toBeGreaterThan(requests + 5 * 21 * output.length + 210 * 4_096);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(held);
    expect(await store.tasks.storedBytesOfClient(other.id)).toBe(await bytesInRows(store, other.id));
    if (store instanceof PgStore) {
      // Folding the log into client_storage changes nothing a reader sees.
      await foldStoredBytesLog(store.pool);
      expect(await store.tasks.storedBytesOfClient(c.id)).toBe(held);
    }

    // Retention: every delivery settled, the tasks pruned, and with them every byte counted for them.
    for (const e of await claimEvents(store, "tok3", { limit: 500 }))
      await store.events.recordAttempt(e.id, "tok3", attemptOf(e, 200, { responseBody: "ok" }), {
        deliveryStatus: "succeeded",
        deliveredAt: NOW,
      });
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(await bytesInRows(store, c.id));
    expect(await store.tasks.pruneFinished(NOW + 1, 100)).toBe(5);
    expect(await bytesInRows(store, c.id)).toBe(0);
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(0);
    expect(await store.tasks.storedBytesOfClient(other.id)).toBe(await bytesInRows(store, other.id));
  });

  it("an output replaced or cleared counts its difference", async () => {
    const store = await h.shared();
    const c = await client(store);
    const { task: t } = await store.tasks.create(task(c.id, fresh("t")));
    const error = JSON.stringify({ message: "ü".repeat(500) });
    const done = await store.tasks.transition(
      t,
      { status: "failed", phase: "done", errorJson: error, completedAt: NOW },
      opts(),
    );
    const withError = await store.tasks.storedBytesOfClient(c.id);
    expect(withError).toBe(await bytesInRows(store, c.id));
    await store.tasks.transition(done!, { errorJson: null, outputJson: "{}" }, opts());
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(await bytesInRows(store, c.id));
    expect(await store.tasks.storedBytesOfClient(c.id)).toBe(withError - Buffer.byteLength(error) + 2);
  });
});

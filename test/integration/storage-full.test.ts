import { describe, expect, it } from "vitest";
import { find as findClient } from "../../src/db/sqlite/clients.js";
import { revokeClient, rotateSecret } from "../../src/services/clients.js";
import { createTask, taskRow } from "../helpers/flow.js";
import { imageBody, type TestRelay, insertTestClient } from "../helpers/relay.js";
import { upstreamSuite } from "../helpers/upstream-suite.js";

/**
 * Acknowledged means stored (issue #11): a database that cannot be written must never produce a 2xx
 * or a success for a change that was not committed; it answers 503 storage_unavailable with
 * Retry-After, /readyz says so, logs stay quiet, and everything works again by itself once space
 * returns. Without root there is no full disk to be had, so two stand-ins: a database that cannot
 * grow (PRAGMA max_page_count: SQLITE_FULL for any write that needs a new page, as a full disk
 * gives) and one that refuses every write (PRAGMA query_only: SQLITE_READONLY, for the small
 * in-place updates a full WAL would refuse at commit).
 */
const suite = upstreamSuite();

function readOnly(t: TestRelay): () => void {
  t.database.sqlite.pragma("query_only = 1");
  return () => t.database.sqlite.pragma("query_only = 0");
}

/** A prompt big enough that storing it needs fresh pages. */
const bigPrompt = (i: number) => `a full disk ${i} ${"x".repeat(32_000)}`; // within the 32,768-character limit

function fill(t: TestRelay): () => void {
  const sqlite = t.database.sqlite;
  const pages = sqlite.pragma("page_count", { simple: true }) as number;
  sqlite.pragma(`max_page_count = ${pages}`);
  // Use up what is free inside the file, so the next write that needs a page fails.
  try {
    for (let i = 0; i < 10_000; i++)
      sqlite.prepare("INSERT INTO health_probe (at, pad) VALUES (0, zeroblob(4000))").run();
  } catch (err) {
    expect((err as { code: string }).code).toBe("SQLITE_FULL");
  }
  return () => {
    sqlite.pragma("max_page_count = 1073741823");
    sqlite.prepare("DELETE FROM health_probe").run();
  };
}

describe("a full database", () => {
  it("a creation answers 503 storage_unavailable with Retry-After, stores nothing, and works again once space returns", async () => {
    const { t } = suite.setup();
    const { apiKey } = t.client();
    const free = fill(t);
    const lines: unknown[] = [];
    const spy = (await import("vitest")).vi
      .spyOn(t.relay.deps.logger, "error")
      .mockImplementation(((obj: unknown) => void lines.push(obj)) as never);
    for (let i = 0; i < 20; i++) {
      const res = await t.request(apiKey, "/openapi/v1/images/generations", {
        method: "POST",
        json: imageBody({ prompt: bigPrompt(i) }),
        idempotencyKey: `full-disk-${i}`,
      });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("storage_unavailable");
    }
    // One log line for the burst, not one stack trace per request.
    expect(lines.length).toBe(1);
    spy.mockRestore();
    const ready = await t.request(null, "/readyz");
    expect(ready.status).toBe(503);
    expect(JSON.stringify(await ready.json())).toContain("database not writable");
    free();
    const list = (await (await t.request(apiKey, "/openapi/v1/tasks")).json()) as { data: unknown[] };
    expect(list.data).toEqual([]);
    const id = await createTask(t, apiKey, { prompt: bigPrompt(0) }, { idempotencyKey: "full-disk-0" });
    expect(taskRow(t, id).phase).toBe("waiting");
    t.clock.advance(11_000);
    expect((await t.request(null, "/readyz")).status).toBe(503); // loops are not running in tests
    expect(JSON.stringify(await (await t.request(null, "/readyz")).json())).not.toContain("database");
  });

  it("rotate-secret and redeliver answer 503, and the stored state is what it was", async () => {
    const { t } = suite.setup();
    const { apiKey, id } = t.client();
    const task = await createTask(t, apiKey, { callback_url: "http://127.0.0.1:9/hook" });
    await t.relay.lifecycle.cancel(taskRow(t, task), null);
    const before = findClient(t.database.db, id)!.webhookSecret;
    const free = readOnly(t);
    const rotated = await t.request(apiKey, "/openapi/v1/webhooks/secret/rotate", { method: "POST" });
    expect(rotated.status).toBe(503);
    const redeliver = await t.request(apiKey, `/openapi/v1/tasks/${task}/redeliver`, { method: "POST" });
    expect(redeliver.status).toBe(503);
    free();
    expect(findClient(t.database.db, id)!.webhookSecret).toBe(before);
  });

  it("client writes raise instead of reporting success (the CLI then exits 1): create, revoke, rotate", async () => {
    const { t } = suite.setup();
    const { apiKey, id } = t.client();
    const free = readOnly(t);
    expect(() => insertTestClient(t.database.db, t.clock, { name: "never-stored" })).toThrow(/readonly/);
    await expect(revokeClient(t.relay.deps, id)).rejects.toThrow(/readonly/);
    await expect(rotateSecret(t.relay.deps, id)).rejects.toThrow(/readonly/);
    free();
    expect((await t.request(apiKey, "/openapi/v1/tasks")).status).toBe(200);
  });
});

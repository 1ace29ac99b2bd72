import type { Statement } from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import type { Database_ } from "../../src/db/sqlite/open.js";
import { countingReceiver, succeededTasks } from "../helpers/delivery.js";
import { status } from "../helpers/receiver.js";
import { upstreamSuite, WORKER_TEST_ENV } from "../helpers/upstream-suite.js";

/**
 * One transaction per turn on SQLite (issue #43): what an attempt changes besides its record (the
 * key's health, the events a circuit's opening postpones) is written in the attempts' group commit,
 * in the transaction of the record itself, never by a statement committing on its own.
 */
const suite = upstreamSuite(WORKER_TEST_ENV);

type Write = { table: string; sql: string; tx: number | null };

const restores: Array<() => void> = [];
afterEach(() => {
  for (const restore of restores.splice(0)) restore();
});

/** Every write statement run on `database` from now on, with the transaction it ran in (null: none, it committed alone). */
function watchWrites(database: Database_): Write[] {
  const { sqlite } = database;
  const writes: Write[] = [];
  let txNo = 0;
  let current: number | null = null;
  const transaction = sqlite.transaction;
  sqlite.transaction = function (this: typeof sqlite, fn: (...args: never[]) => unknown) {
    return transaction.call(this, (...args: never[]) => {
      const outer = current;
      current = ++txNo;
      try {
        return fn(...args);
      } finally {
        current = outer;
      }
    });
  } as typeof sqlite.transaction;
  const proto = Object.getPrototypeOf(sqlite.prepare("SELECT 1")) as Record<string, (...a: unknown[]) => unknown>;
  const natives = (["run", "get", "all", "iterate"] as const).map((m) => [m, proto[m]!] as const);
  for (const [m, native] of natives)
    proto[m] = function (this: Statement, ...args: unknown[]) {
      const write = /^\s*(?:insert\s+into|update|delete\s+from)\s+[`"]?(\w+)/i.exec(this.source);
      if (write) writes.push({ table: write[1]!, sql: this.source, tx: sqlite.inTransaction ? current : null });
      return native.apply(this, args);
    };
  restores.push(() => {
    sqlite.transaction = transaction;
    for (const [m, native] of natives) proto[m] = native;
  });
  return writes;
}

describe("SQLite: an attempt's side effects share its record's transaction", () => {
  it("a failing receiver: each failure's key-health write and the circuit's postponement commit with the attempts' records", async () => {
    const { t } = suite.setup({ WEBHOOK_RETRY_SCHEDULE: "0s,1m,1m" });
    const failing = await countingReceiver((fn) => suite.cleanup(fn), status(500));
    const c = t.client("failing");
    const events = await succeededTasks(t, c.apiKey, failing.url(), 6);
    const writes = watchWrites(t.database);

    expect(await t.relay.dispatcher.runOnce()).toBe(events.length);

    // Six failures in a row open the key's circuit (at the 5th): the postponement is written too.
    const postponed = writes.filter((w) => /^update "events" set "next_attempt_at" = \?/.test(w.sql));
    expect(postponed).toHaveLength(1);
    expect(postponed[0]!.tx).not.toBeNull();
    const health = writes.filter((w) => w.table === "endpoint_health");
    expect(health).toHaveLength(events.length);
    // No write of the turn committed on its own.
    expect(writes.filter((w) => w.tx === null)).toEqual([]);
    // Each health write is in a transaction that also wrote attempts' records.
    const withRecords = new Set(writes.filter((w) => w.table === "delivery_attempts").map((w) => w.tx));
    for (const w of health) expect(withRecords.has(w.tx)).toBe(true);
    expect(await t.store.keyHealth.failingOf(c.id)).toMatchObject([
      { host: new URL(failing.url()).host, failedAttempts: events.length, lastError: "HTTP 500" },
    ]);
  });
});

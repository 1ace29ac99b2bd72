import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../src/db/sqlite/open.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { SqliteStore } from "../../src/db/sqlite/store.js";
import { pgStore, sqliteStore } from "../../src/open-store.js";
import { newClient } from "../../src/services/clients.js";
import type { NewTaskRequest, Store } from "../../src/store/store.js";
import { freshPgDatabase } from "./pg.js";

/** The two drivers every store and relay suite runs on. */
export type Dialect = "sqlite" | "postgres";

/** A fresh store, and `another` process's view of the same database (the same store on SQLite). */
export type StoreFactory = () => Promise<{ store: Store; another: () => Promise<Store> }>;

/**
 * The two drivers, each as a factory of fresh stores, for suites that run the same tests on both
 * (describe.each). `cleanup` registers what to close after the test.
 */
export function storeDialects(cleanup: (fn: () => Promise<void>) => void): Array<[Dialect, StoreFactory]> {
  return [
    [
      "sqlite",
      async () => {
        const dir = mkdtempSync(join(tmpdir(), "genrelay-contract-"));
        const store = sqliteStore(openDatabase(join(dir, "relay.db")));
        cleanup(async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        });
        return { store, another: async () => store };
      },
    ],
    [
      "postgres",
      async () => {
        const db = await freshPgDatabase();
        const stores: Store[] = [];
        const open = async () => {
          const s = await pgStore(db.url, { migrate: false, max: 4 });
          stores.push(s);
          return s;
        };
        const store = await open();
        cleanup(async () => {
          for (const s of stores) await s.close().catch(() => {});
          await db.drop();
        });
        return { store, another: open };
      },
    ],
  ];
}

/** Empties every table of the store's database, counters and sequences too: what a new database holds. */
export async function emptyStore(store: Store): Promise<void> {
  if (store instanceof SqliteStore) {
    const { sqlite } = store.database;
    const tables = (
      sqlite
        .prepare(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '__drizzle%'",
        )
        .all() as Array<{ name: string }>
    ).map((t) => t.name);
    sqlite.pragma("foreign_keys = OFF");
    for (const table of [...tables, "sqlite_sequence"]) sqlite.exec(`DELETE FROM "${table}"`);
    sqlite.pragma("foreign_keys = ON");
    return;
  }
  // DELETE, children before the tables they reference: a hundred times faster than TRUNCATE on small tables.
  const { pool } = store as PgStore;
  const tables = (await pool.query("SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public'")).rows.map(
    (r: { t: string }) => r.t,
  );
  const refs = (
    await pool.query(
      "SELECT conrelid::regclass::text AS child, confrelid::regclass::text AS parent FROM pg_constraint WHERE contype = 'f'",
    )
  ).rows as Array<{ child: string; parent: string }>;
  const order: string[] = [];
  while (order.length < tables.length) {
    for (const t of tables)
      if (!order.includes(t) && refs.every((r) => r.parent !== t || r.child === t || order.includes(r.child)))
        order.push(t);
  }
  await pool.query(order.map((t) => `DELETE FROM "${t}";`).join(" "));
}

export const CONTRACT_NOW = Date.UTC(2026, 0, 1);
let n = 0;

export async function contractClient(store: Store, limits: { creditLimit?: number; maxWaiting?: number } = {}) {
  const { row } = newClient(CONTRACT_NOW, { name: `c${n++}`, ...limits });
  return store.clients.insert(row);
}

/** A plain image task's row as intake writes it, waiting since `now`, its idempotency key `k-<id>`. */
export function imageTaskRow(
  id: string,
  clientId: string,
  now: number,
  callbackUrl: string | null,
  events: string[],
): NewTaskRequest["row"] {
  return {
    id,
    clientId,
    type: "image",
    model: "p-image",
    status: "queued",
    phase: "waiting",
    requestJson: "{}",
    callbackUrl,
    callbackEvents: JSON.stringify(events),
    idempotencyKey: `k-${id}`,
    requestHash: "h",
    upstreamAccount: "default",
    upstreamIdempotencyKey: `genrelay-${id}`,
    priceKey: "",
    nextRunAt: now,
    createdAt: now,
    updatedAt: now,
  };
}

/**
 * A creation request for a plain image task of the client, reserving `reserve` points (the
 * decision reads the waiting count and the credit position, as intake's does); `overrides` replace
 * parts of the request (`admit`, say).
 */
export function contractTask(
  clientId: string,
  key: string,
  opts: { callbackUrl?: string; reserve?: number } = {},
  overrides: Partial<NewTaskRequest> = {},
): NewTaskRequest {
  const id = `task_${String(n++).padStart(6, "0")}_${key}`;
  return {
    row: {
      ...imageTaskRow(id, clientId, CONTRACT_NOW, opts.callbackUrl ?? "https://hooks.example/x", [
        "task.processing",
        "task.succeeded",
        "task.failed",
        "task.canceled",
      ]),
      idempotencyKey: key,
    },
    needs: { waiting: true, credit: true },
    admit: () => opts.reserve ?? 0,
    ...overrides,
  };
}

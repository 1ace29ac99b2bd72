import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pgStore } from "../../src/open-store.js";
import type { PgStore } from "../../src/db/pg/pg-store.js";
import { freshPgDatabase } from "../helpers/pg.js";

describe("pg smoke", () => {
  let store: PgStore;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await freshPgDatabase();
    drop = db.drop;
    store = await pgStore(db.url, { migrate: false });
  });
  afterAll(async () => {
    await store.close();
    await drop();
  });
  it("round-trips a client", async () => {
    const c = await store.clients.insert({ id: "cli_1", name: "n", apiKeyHash: "h", apiKeyPrefix: "p", webhookSecret: "s", createdAt: Date.now() });
    expect(c.createdAt).toBeTypeOf("number");
    expect((await store.clients.find("cli_1"))?.name).toBe("n");
  });
});

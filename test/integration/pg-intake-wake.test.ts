import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { PgStore } from "../../src/db/pg/store.js";
import { CHANNEL } from "../../src/db/pg/mapping.js";
import { pgStore } from "../../src/open-store.js";
import type { NudgeTarget } from "../../src/store/store.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { contractClient, contractTask } from "../helpers/store-dialects.js";

/**
 * NOTIFY only where someone listens (issue #43): a creation wakes the submitter of its account. On
 * the instance that leads the account (and listens) that is a local nudge, no NOTIFY (whose queue
 * lock every committing instance takes); elsewhere it is a NOTIFY, which the leader hears.
 */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Every payload on the relay's channel, as a session of its own hears them. */
async function overhear(url: string) {
  const heard: string[] = [];
  const listener = new pg.Client({ connectionString: url });
  await listener.connect();
  cleanups.push(() => listener.end());
  const waiting = new Map<string, () => void>();
  listener.on("notification", (n) => {
    heard.push(n.payload ?? "");
    waiting.get(n.payload ?? "")?.();
  });
  await listener.query(`LISTEN ${CHANNEL}`);
  /** What was heard before a marker sent now (notifications arrive in commit order). */
  const upTo = async (store: PgStore, marker: string) => {
    const arrived = new Promise<void>((resolve) => waiting.set(marker, resolve));
    await store.pool.query("SELECT pg_notify($1, $2)", [CHANNEL, marker]);
    await arrived;
    return heard.splice(0).filter((p) => p !== marker);
  };
  /** Resolves once `payload` is heard (the batched path sends its NOTIFY after answering). */
  const hears = (payload: string) =>
    heard.includes(payload) ? Promise.resolve() : new Promise<void>((resolve) => waiting.set(payload, resolve));
  return { upTo, hears };
}

describe("a creation wakes its account's submitter on PostgreSQL", () => {
  it.each([
    ["batched", false],
    ["per request", true],
  ])("%s: the leading, listening instance nudges itself; another instance sends NOTIFY", async (_path, capped) => {
    const db = await freshPgDatabase();
    cleanups.push(() => db.drop());
    const open = async () => {
      const s = (await pgStore(db.url, { migrate: false, max: 4 })) as PgStore;
      cleanups.push(() => s.close());
      return s;
    };
    const [leader, other] = [await open(), await open()];
    const nudges: NudgeTarget[] = [];
    await leader.listen((t) => nudges.push(t));
    await other.listen(() => {});
    expect(await leader.ops.leads("default", { holder: "leader", leaseMs: 60_000 })).not.toBeNull();
    const { upTo, hears } = await overhear(db.url);
    const c = await contractClient(leader, capped ? { maxWaiting: 100 } : {});
    const req = (key: string) => {
      const r = contractTask(c.id, key);
      return { ...r, needs: { waiting: capped, credit: false } };
    };

    await leader.tasks.create(req("on-leader"));
    expect(nudges).toEqual(["submitter"]);
    expect(await upTo(leader, "marker-1")).toEqual([]);

    await other.tasks.create(req("on-other"));
    // Heard on the channel (by the leader's session too, which nudges its submitter then).
    await hears("submitter");
  });
});

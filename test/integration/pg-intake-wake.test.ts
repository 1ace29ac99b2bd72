import pg from "pg";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CREATED_NOTIFY_EVERY_MS } from "../../src/db/pg/intake.js";
import type { PgStore } from "../../src/db/pg/store.js";
import { CHANNEL, createdAccounts, submitterPayload } from "../../src/db/pg/mapping.js";
import { pgStore } from "../../src/open-store.js";
import type { NewTaskRequest, NudgeTarget } from "../../src/store/store.js";
import { MAX_KEY_BYTES, StoreValueError } from "../../src/store/values.js";
import { freshPgDatabase } from "../helpers/pg.js";
import { CONTRACT_NOW, contractClient, contractTask } from "../helpers/store-dialects.js";

/**
 * NOTIFY only where someone listens (issue #43): a creation wakes the submitter of its account. On
 * the instance that leads the account (and listens) that is a local nudge, no NOTIFY (whose queue
 * lock every committing instance takes); elsewhere it is a NOTIFY, which the leader hears. So does a
 * change that writes an event wake the dispatcher, and it writes its parts in one statement.
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

/** A fresh database and two stores of it: two instances. */
async function twoInstances() {
  const db = await freshPgDatabase();
  cleanups.push(() => db.drop());
  const open = async () => {
    const s = (await pgStore(db.url, { migrate: false, max: 4 })) as PgStore;
    cleanups.push(() => s.close());
    return s;
  };
  return { db, stores: [await open(), await open()] as const };
}

/** Calls `seen` with every statement the store's pool runs from now on: its text, and its name when it has one. */
function watchStatements(store: PgStore, seen: (text: string, name: string | undefined) => void): void {
  const watched = new WeakSet<object>();
  store.pool.on("acquire", (conn) => {
    if (watched.has(conn)) return;
    watched.add(conn);
    const query = conn.query.bind(conn) as (...args: unknown[]) => unknown;
    (conn as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0] as string | { name?: string; text: string };
      if (typeof first === "string") seen(first, undefined);
      else seen(first.text, first.name);
      return query(...args);
    };
  });
}

/** Every statement the store's pool runs from now on, by its first three words. */
function statementsOf(store: PgStore): string[] {
  const ran: string[] = [];
  watchStatements(store, (text) => ran.push(text.replace(/\s+/g, " ").trim().split(" ").slice(0, 3).join(" ")));
  return ran;
}

/**
 * Two listening instances, the first leading the account, the nudges it is given, the channel
 * overheard, and creations of a client (capped: the per-request path) with a row's changes.
 */
async function leaderAndOther(capped: boolean, row: Partial<NewTaskRequest["row"]> = {}) {
  const { db, stores } = await twoInstances();
  const [leader, other] = stores;
  const nudges: Array<[NudgeTarget, readonly string[] | undefined]> = [];
  await leader.listen((t, created) => nudges.push([t, created]));
  await other.listen(() => {});
  expect(await leader.ops.leads("default", { holder: "leader", leaseMs: 60_000 })).not.toBeNull();
  const c = await contractClient(leader, capped ? { maxWaiting: 100 } : {});
  const req = (key: string): NewTaskRequest => {
    const r = contractTask(c.id, key);
    return { ...r, row: { ...r.row, ...row }, needs: { waiting: capped, credit: false } };
  };
  return { leader, other, nudges, req, ...(await overhear(db.url)) };
}

describe("a creation wakes its account's submitter on PostgreSQL", () => {
  it.each([
    ["batched", false],
    ["per request", true],
  ])("%s: the leading, listening instance nudges itself; another instance sends NOTIFY", async (_path, capped) => {
    const { leader, other, nudges, req, upTo, hears } = await leaderAndOther(capped);

    await leader.tasks.create(req("on-leader"));
    // Named as creations of the account without a deadline: a submitter that found it full lets them pass.
    expect(nudges).toEqual([["submitter", ["default"]]]);
    expect(await upTo(leader, "marker-1")).toEqual([]);

    await other.tasks.create(req("on-other"));
    // Heard on the channel (by the leader's session too, which nudges its submitter then, naming the account).
    await hears("created:default");
    await vi.waitFor(() =>
      expect(nudges).toEqual([
        ["submitter", ["default"]],
        ["submitter", ["default"]],
      ]),
    );
  });

  it.each([
    ["batched", false],
    ["per request", true],
  ])("%s: a creation with a deadline wakes the submitter whatever it found (its expiry)", async (_path, capped) => {
    const { leader, other, nudges, req, hears } = await leaderAndOther(capped, { expiresAt: CONTRACT_NOW + 60_000 });
    await leader.tasks.create(req("on-leader"));
    expect(nudges).toEqual([["submitter", undefined]]);
    await other.tasks.create(req("on-other"));
    await hears("submitter");
    await vi.waitFor(() =>
      expect(nudges).toEqual([
        ["submitter", undefined],
        ["submitter", undefined],
      ]),
    );
  });
});

describe("group commits of creations on PostgreSQL", () => {
  it("creations arriving while a batch commits go together in the next, its NOTIFY in the same statement", async () => {
    const { db, stores } = await twoInstances();
    const [leader, other] = stores;
    await leader.listen(() => {});
    await other.listen(() => {});
    expect(await leader.ops.leads("default", { holder: "leader", leaseMs: 60_000 })).not.toBeNull();
    const { hears } = await overhear(db.url);
    const c = await contractClient(other);
    const req = (key: string) => ({ ...contractTask(c.id, key), needs: { waiting: false, credit: false } });
    // The first batch's INSERT waits behind a session holding the tasks table against writes.
    const blocker = new pg.Client({ connectionString: db.url });
    await blocker.connect();
    cleanups.push(() => blocker.end());
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE tasks IN SHARE MODE");
    const ran = statementsOf(other);
    const first = other.tasks.create(req("first"));
    await vi.waitFor(() => expect(ran).toEqual(["WITH ins AS"]), { timeout: 5_000, interval: 5 });
    // Nine more, each in a turn of its own, while the first batch is held.
    const rest: Array<Promise<unknown>> = [];
    for (let i = 0; i < 9; i++) {
      rest.push(other.tasks.create(req(`next-${i}`)));
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(ran).toEqual(["WITH ins AS"]);
    await blocker.query("ROLLBACK");
    const created = await Promise.all([first, ...rest]);
    expect(created.map((r) => (r as { replayed: boolean }).replayed)).toEqual(Array(10).fill(false));
    // Two statements for ten creations; the leader elsewhere woken by a NOTIFY of theirs.
    await hears("created:default");
    expect(ran).toEqual(["WITH ins AS", "WITH ins AS"]);
  });

  it("batches in quick succession elsewhere send one NOTIFY, then one naming what came after it", async () => {
    const { leader, other, nudges, req, upTo, hears } = await leaderAndOther(false);
    let batches = 0;
    watchStatements(other, (text) => {
      if (text.startsWith("WITH ins AS")) batches++;
    });
    // Time stands still while eight batches commit, one after the other.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const now = performance.now();
    const clock = vi.spyOn(performance, "now").mockReturnValue(now);
    try {
      for (let i = 0; i < 8; i++) await other.tasks.create(req(`quick-${i}`));
      expect(batches).toBe(8);
      // The first batch's NOTIFY only, not one a batch.
      expect(await upTo(leader, "marker-quick")).toEqual(["created:default"]);
      // The seven after it are not forgotten: a NOTIFY of their own names their account once the interval passed.
      await vi.advanceTimersByTimeAsync(CREATED_NOTIFY_EVERY_MS - 1);
      expect(await upTo(leader, "marker-early")).toEqual([]);
      clock.mockReturnValue(now + CREATED_NOTIFY_EVERY_MS);
      await vi.advanceTimersByTimeAsync(1);
      await hears("created:default");
      // (vi.waitFor advances the fake timers: only now.) The leader's submitter heard both.
      await vi.waitFor(() =>
        expect(nudges).toEqual([
          ["submitter", ["default"]],
          ["submitter", ["default"]],
        ]),
      );
    } finally {
      clock.mockRestore();
      vi.useRealTimers();
    }
  });
});

/** A creation of that client the store batches (no cap, no credit limit), with changes to its row. */
const batchable =
  (clientId: string) =>
  (key: string, extra: Partial<NewTaskRequest["row"]> = {}): NewTaskRequest => {
    const r = contractTask(clientId, key);
    return { ...r, row: { ...r.row, ...extra }, needs: { waiting: false, credit: false } };
  };

describe("one prepared statement for every batch on PostgreSQL", () => {
  it("writes batches of any size through one statement text; a row the store refuses fails alone", async () => {
    const { stores } = await twoInstances();
    const [one] = stores;
    const req = batchable((await contractClient(one)).id);
    const texts = new Set<string>();
    watchStatements(one, (text, name) => {
      if (text.includes("INSERT INTO tasks")) texts.add(name ?? "");
    });
    // Batches of 1, 3 and 2 rows (each in a turn of its own).
    for (const keys of [["a"], ["b", "c", "d"], ["e", "f"]]) {
      const created = await Promise.all(keys.map((k) => one.tasks.create(req(k))));
      expect(created.map((r) => r.task.idempotencyKey)).toEqual(keys);
    }
    // (With the NOTIFY: this store leads no account here; batches within CREATED_NOTIFY_EVERY_MS of it go without.)
    expect([...texts].sort()).toEqual(
      ["genrelay_intake_batch", "genrelay_intake_batch_notify"].filter((name) => texts.has(name)),
    );
    expect(texts.has("genrelay_intake_batch_notify")).toBe(true);
    // An idempotency key past what an index holds, in a batch with a good one: refused alone.
    const [good, bad] = await Promise.allSettled([
      one.tasks.create(req("g")),
      one.tasks.create(req("k".repeat(MAX_KEY_BYTES + 1))),
    ]);
    expect(good).toMatchObject({ status: "fulfilled", value: { replayed: false, task: { idempotencyKey: "g" } } });
    expect(bad).toMatchObject({ status: "rejected", reason: expect.any(StoreValueError) });
    const keys = (await one.pool.query("SELECT idempotency_key FROM tasks ORDER BY idempotency_key")).rows;
    expect(keys.map((r) => r.idempotency_key)).toEqual(["a", "b", "c", "d", "e", "f", "g"]);
  });

  it("a batch waits a turn more while creations keep arriving, so they go in one statement", async () => {
    const { stores } = await twoInstances();
    const [one] = stores;
    const req = batchable((await contractClient(one)).id);
    let batches = 0;
    watchStatements(one, (text) => {
      if (text.startsWith("WITH ins AS")) batches++;
    });
    // Two in this turn, a third in the next: without the wait the first two go alone.
    const first = [one.tasks.create(req("a")), one.tasks.create(req("b"))];
    const third = new Promise((resolve) => setImmediate(() => resolve(one.tasks.create(req("c")))));
    const created = (await Promise.all([...first, third])) as Array<{ replayed: boolean }>;
    expect(created.map((r) => r.replayed)).toEqual([false, false, false]);
    expect(batches).toBe(1);
  });

  it("answers each creation of a batch with the row as it is stored, without reading it back", async () => {
    const { stores } = await twoInstances();
    const [one] = stores;
    const req = batchable((await contractClient(one)).id);
    // Values the store rewrites (a lone surrogate) or fills in (absent columns with defaults).
    const created = await Promise.all([
      one.tasks.create(req("a", { requestJson: '{"prompt":"\ud800 x"}', priceKey: undefined })),
      one.tasks.create(req("b", { metadataJson: null, storedBytes: 123 })),
    ]);
    for (const { task } of created) expect(task).toStrictEqual(await one.tasks.find(task.id));
    expect(created[0]!.task.requestJson).toBe('{"prompt":"\ufffd x"}');
  });
});

describe("a creation's estimate on PostgreSQL", () => {
  it("reads its model's duration samples through a named statement, prepared once per connection", async () => {
    const { stores } = await twoInstances();
    const [one] = stores;
    const reads: Array<string | undefined> = [];
    watchStatements(one, (text, name) => {
      if (text.startsWith("SELECT samples_json")) reads.push(name);
    });
    await one.accounts.saveDurationSamples("image", "m-1", [4_000, 6_000], CONTRACT_NOW);
    expect(await one.accounts.durationSamples("image", "m-1")).toEqual([4_000, 6_000]);
    expect(await one.accounts.durationSamples("image", "m-2")).toEqual([]);
    expect(reads).toEqual(["genrelay_duration_samples", "genrelay_duration_samples"]);
  });

  it("shares one read of a model's samples among the creations that follow; a save here is read at once", async () => {
    const { stores } = await twoInstances();
    const [one, two] = stores;
    let reads = 0;
    watchStatements(one, (text) => {
      if (text.startsWith("SELECT samples_json")) reads++;
    });
    await one.accounts.saveDurationSamples("image", "m-1", [4_000, 6_000], CONTRACT_NOW);
    const got = await Promise.all(Array.from({ length: 5 }, () => one.accounts.durationSamples("image", "m-1")));
    expect(got).toEqual(Array(5).fill([4_000, 6_000]));
    expect(await one.accounts.durationSamples("image", "m-1")).toEqual([4_000, 6_000]);
    expect(reads).toBe(1);
    // Each caller gets an array of its own (DurationStats adds to the one it gets).
    expect(got[0]).not.toBe(got[1]);
    await one.accounts.saveDurationSamples("image", "m-1", [5_000], CONTRACT_NOW);
    expect(await one.accounts.durationSamples("image", "m-1")).toEqual([5_000]);
    expect(reads).toBe(2);
    // Another instance reads the store's figure.
    expect(await two.accounts.durationSamples("image", "m-1")).toEqual([5_000]);
  });
});

describe("a change that writes an event on PostgreSQL", () => {
  const opts = (now: number) => ({ now, token: null, firstAttemptDelayMs: 0 });
  const setup = async () => {
    const { db, stores } = await twoInstances();
    return { db, here: stores[0], elsewhere: stores[1] };
  };

  it("wakes this instance's own dispatcher once committed, no NOTIFY, when its loops listen here; else NOTIFY", async () => {
    const { db, here, elsewhere } = await setup();
    // What a nudge of the dispatcher finds committed (read on another pool, as its claim would).
    let ending = "";
    const foundAtNudge: Array<Promise<number>> = [];
    await here.listen((t) => {
      if (t === "dispatcher")
        foundAtNudge.push(
          elsewhere.pool
            .query("SELECT count(*)::int AS n FROM events WHERE task_id = $1", [ending])
            .then((r) => r.rows[0].n as number),
        );
    });
    const { upTo } = await overhear(db.url);
    const c = await contractClient(here);
    const { task: t } = await here.tasks.create(contractTask(c.id, "ends-here"));
    await upTo(here, "marker-0");

    ending = t.id;
    await here.tasks.transition(t, { status: "succeeded", phase: "done" }, opts(CONTRACT_NOW + 1));
    expect(await Promise.all(foundAtNudge)).toEqual([1]);
    expect(await upTo(here, "marker-1")).toEqual([]);

    // An instance whose loops do not run here (a CLI, a store of its own) tells the others.
    const { task: u } = await elsewhere.tasks.create(contractTask(c.id, "ends-elsewhere"));
    await upTo(elsewhere, "marker-2");
    await elsewhere.tasks.transition(u, { status: "succeeded", phase: "done" }, opts(CONTRACT_NOW + 2));
    expect(await upTo(elsewhere, "marker-3")).toEqual(["dispatcher"]);
  });

  it("a submission reads the client's books and the learned price in one statement", async () => {
    const { here } = await setup();
    const c = await contractClient(here);
    await here.pool.query("INSERT INTO learned_prices (price_key, points, updated_at) VALUES ('p-image:2', 40, 0)");
    const req = contractTask(c.id, "priced");
    req.row = { ...req.row, priceKey: "p-image:2" };
    const { task: t } = await here.tasks.create(req);
    const lease = { now: CONTRACT_NOW, leaseMs: 30_000, token: "s:1", limit: 1 };
    expect(await here.tasks.claimDue("waiting", "default", lease)).toHaveLength(1);
    const ran = statementsOf(here);
    let learned: number | null | undefined;
    const later = { nextRunAt: CONTRACT_NOW + 60_000, claimToken: null, claimedUntil: null };
    const result = await here.tasks.beginSubmission(
      t.id,
      "s:1",
      (ctx) => ((learned = ctx.learnedPrice), { kind: "wait", transition: false, patch: later }),
      { ...opts(CONTRACT_NOW), token: "s:1" },
    );
    expect(result).toMatchObject({ kind: "wait", task: later });
    expect(learned).toBe(40);
    expect(ran).toEqual([
      "BEGIN",
      "SELECT t.* FROM",
      "SELECT c.credit_limit, c.revoked_at,",
      "UPDATE tasks SET",
      "COMMIT",
    ]);
  });

  it("writes the task, its charge, the tasks it wakes, the price it taught and its event in one statement", async () => {
    const { here } = await setup();
    await here.listen(() => {});
    const c = await contractClient(here, { creditLimit: 100 });
    const req = contractTask(c.id, "charged", { reserve: 30 });
    req.row = { ...req.row, priceKey: "p-image:1" };
    const { task: t } = await here.tasks.create(req);
    const later = contractTask(c.id, "held");
    later.row = { ...later.row, nextRunAt: CONTRACT_NOW + 3_600_000 };
    const { task: held } = await here.tasks.create(later);

    const ran = statementsOf(here);
    const done = await here.tasks.transition(
      t,
      { status: "succeeded", phase: "done", pointsCharged: 25 },
      opts(CONTRACT_NOW + 5),
    );
    expect(ran).toEqual([
      "BEGIN",
      "SELECT t.* FROM", // the task row locked (watch-barrier.ts)
      "SELECT * FROM", // the client's endpoints
      "WITH s0 AS", // the row, the charge, the woken tasks, the learned price, the event
      "COMMIT",
    ]);
    expect(done).toMatchObject({ status: "succeeded", pointsCharged: 25, pointsReserved: 0 });
    expect((await here.clients.creditPosition(c.id))!.charged).toBe(25);
    expect((await here.tasks.find(held.id))!.nextRunAt).toBe(CONTRACT_NOW + 5);
    const events = (await here.pool.query("SELECT type FROM events WHERE task_id = $1", [t.id])).rows;
    expect(events).toEqual([{ type: "task.succeeded" }]);
    const learned = (await here.pool.query("SELECT points FROM learned_prices WHERE price_key = 'p-image:1'")).rows;
    expect(learned).toEqual([{ points: 25 }]);
  });
});

describe("the submitter's NOTIFY payload on PostgreSQL", () => {
  it("names the accounts of creations without a deadline, and nothing else", () => {
    const accounts = ["default", "a b%c", "ü"];
    const payload = submitterPayload(accounts, true);
    expect(payload).toBe("created:default a%20b%25c %C3%BC");
    expect(createdAccounts(payload)).toEqual(accounts);
    // With a deadline, too long for a payload that names, or naming none: a plain wake-up, heard whatever the submitter found.
    expect(submitterPayload(accounts, false)).toBe("submitter");
    expect(submitterPayload(["x".repeat(1_000)], true)).toBe("submitter");
    expect(createdAccounts("created:")).toBeNull();
    expect(createdAccounts("submitter")).toBeNull();
  });
});

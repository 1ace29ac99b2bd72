// The task side's store pieces of issue #43 in isolation, old build beside new, in one process, each
// on its own in-memory database migrated by its own build: a group-commit unit in its savepoint, the
// task read by id, claimDue with and without an id list; the tenth round's: a new task's waitingAhead
// behind 1,000 waiting, the account state read, a model's duration samples, a transition's write and the in-flight list of 64
// (CPU µs per call, medians of rounds); the eleventh round's: a task's life (its row and its three
// transitions as the end-to-end run writes them, in one transaction), PIECES=task_life; claims of 8
// listed tasks among 1,000 due waiting ones (claimDue with ids, claimIds), PIECES=claim_picked,claim_ids;
// a completion teaching the price its key holds, PIECES=learn_price.
//   node bench/task-store-micro.mjs OLD_DIST [NEW_DIST=dist] [rounds=5]
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { median } from "./lib/stats.mjs";

const [oldDist, newDist = "dist", roundsArg = "5"] = process.argv.slice(2);
const load = async (dist, file) => import(pathToFileURL(resolve(dist, file)).href);

async function side(dist) {
  const { openDatabase } = await load(dist, "db/sqlite/open.js");
  const { GroupCommit } = await load(dist, "db/sqlite/group-commit.js");
  const { findTaskPrepared } = await load(dist, "db/sqlite/tasks.js");
  const { claimDue, claimIds, listInFlight } = await load(dist, "db/sqlite/task-claims.js");
  const { waitingAhead, writeTask } = await load(dist, "db/sqlite/tasks.js");
  const { state, sqliteAccounts } = await load(dist, "db/sqlite/accounts.js");
  const { transitionIn } = await load(dist, "db/sqlite/store.js");
  const { sqliteStore } = await load(dist, "open-store.js");
  const { transitionRules } = await load(dist, "core/transition.js");
  const { learnPrice } = await load(dist, "db/sqlite/clients.js");
  const { newClient } = await load(dist, "services/clients.js");
  const database = openDatabase(":memory:");
  const { db, sqlite } = database;
  sqlite.pragma("foreign_keys = OFF");
  const insert = sqlite.prepare(`INSERT INTO tasks (id, client_id, type, model, status, phase, request_json,
    callback_events, idempotency_key, request_hash, upstream_account, upstream_idempotency_key, next_run_at,
    created_at, updated_at, poll_count) VALUES (?, 'cli_1', 'image', 'p-image', 'running', 'submitted', '{"prompt":"x"}',
    '[]', ?, 'h', 'default', ?, 0, 1, 1, 1)`);
  const ids = Array.from({ length: 64 }, (_, i) => `task_${String(i).padStart(26, "0")}`);
  for (const id of ids) insert.run(id, id, `g-${id}`);
  const queued = Array.from({ length: 1000 }, (_, i) => `task_q${String(i).padStart(25, "0")}`);
  for (const id of queued) insert.run(id, id, `g-${id}`);
  sqlite.prepare("UPDATE tasks SET phase = 'waiting', upstream_account = 'q' WHERE id LIKE 'task_q%'").run();
  sqlite
    .prepare("INSERT INTO upstream_accounts (id, learned_max_concurrent, updated_at) VALUES ('default', 8, 1)")
    .run();
  const accounts = sqliteAccounts({ database });
  await accounts.saveDurationSamples("image", "p-image", [900, 1000, 1100], 1);
  const noop = sqlite.prepare("SELECT 1");
  // A task's life as the end-to-end run writes it (eleventh round): intake's row, then the three
  // transitions (the submission's reservation, the upstream's acceptance, the poll that ends it),
  // with the patches the workers pass (each names columns it leaves as they are), on a store of its own.
  const life = sqliteStore(openDatabase(":memory:"));
  const lifeClient = await life.clients.insert(newClient(1, { name: "life" }).row);
  const lifeInsert = life.database.sqlite.prepare(`INSERT INTO tasks (id, client_id, type, model, status, phase,
    request_json, callback_url, callback_events, idempotency_key, request_hash, upstream_account, upstream_idempotency_key,
    next_run_at, created_at, updated_at) VALUES (?, ?, 'image', 'p-image', 'queued', 'waiting', '{"prompt":"x"}',
    'https://hooks.example/x', '["task.processing","task.succeeded","task.failed"]', ?, 'h', 'default', ?, 1, 1, 1)`);
  let lived = 0;
  const lifeOf = () => {
    const id = `task_l${String(lived++).padStart(25, "0")}`;
    const at = 100 + lived;
    const o = { now: at, token: null, firstAttemptDelayMs: 0 };
    const released = { claimedUntil: null, claimToken: null };
    life.database.sqlite.transaction(() => {
      lifeInsert.run(id, lifeClient.id, id, `g-${id}`);
      transitionIn(life.database.db, transitionRules, id, { submitAttempts: 1, pointsReserved: 7 }, o);
      transitionIn(
        life.database.db,
        transitionRules,
        id,
        {
          status: "queued",
          pointsCharged: null,
          pointsRefunded: null,
          updatedAt: at,
          upstreamTaskId: `up-${id}`,
          phase: "submitted",
          submittedAt: at,
          nextRunAt: at + 1000,
          conflictSince: null,
          pointsReserved: 0,
          ...released,
        },
        o,
      );
      transitionIn(
        life.database.db,
        transitionRules,
        id,
        {
          status: "succeeded",
          pointsCharged: null,
          pointsRefunded: null,
          updatedAt: at,
          phase: "done",
          completedAt: at,
          nextRunAt: null,
          outputJson: '{"images":[{"url":"https://cdn.example/a.png"}]}',
          errorJson: null,
          pollCount: 1,
          ...released,
        },
        o,
      );
    })();
  };
  const commits = new GroupCommit(db, 256);
  let now = 10;
  const lease = { account: "default", leaseMs: 5, token: "t", limit: 8 };
  return {
    // 32 units a commit, each in its own savepoint (GroupCommit.run): per unit.
    unit: { per: 32, fn: () => Promise.all(Array.from({ length: 32 }, () => commits.run(() => noop.get()))) },
    find: { per: 1, fn: () => findTaskPrepared(db, ids[7]) },
    waiting_ahead: { per: 1, fn: () => waitingAhead(db, "q", queued[999]) },
    account_state: { per: 1, fn: () => state(db, "default") },
    write_task: { per: 1, fn: () => writeTask(db, ids[9], null, { pollCount: now++, updatedAt: now }) },
    duration_samples: { per: 1, fn: () => accounts.durationSamples("image", "p-image") },
    in_flight: { per: 1, fn: () => listInFlight(db, "default") },
    task_life: { per: 1, fn: lifeOf },
    // A completion teaching the price its key already holds (twelfth round): 32 in one transaction.
    learn_price: {
      per: 32,
      fn: () =>
        sqlite.transaction(() => {
          for (let i = 0; i < 32; i++) learnPrice(db, "pk-micro", 5, now++);
        })(),
    },
    // The fair submitter's picks and a list sweep's ids, 8 listed among 1,000 due waiting tasks.
    claim_picked: {
      per: 1,
      fn: () => claimDue(db, { phase: "waiting", ...lease, account: "q", now: (now += 10), ids: queued.slice(0, 8) }),
    },
    claim_ids: {
      per: 1,
      fn: () => claimIds(db, { ids: queued.slice(8, 16), phase: "waiting", now: (now += 10), leaseMs: 5, token: "t" }),
    },
    claim_due: { per: 1, fn: () => claimDue(db, { phase: "submitted", ...lease, now: (now += 10) }) },
    claim_listed: {
      per: 1,
      fn: () => claimDue(db, { phase: "submitted", ...lease, now: (now += 10), ids: ids.slice(0, 8) }),
    },
  };
}

const sides = { old: await side(oldDist), new: await side(newDist) };
const N = 4_000;
for (const piece of process.env.PIECES ? process.env.PIECES.split(",") : Object.keys(sides.new)) {
  const out = { old: [], new: [] };
  for (let r = 0; r < Number(roundsArg); r++) {
    for (const name of r % 2 === 0 ? ["old", "new"] : ["new", "old"]) {
      const { fn, per } = sides[name][piece];
      for (let i = 0; i < 500; i++) await fn();
      const started = process.cpuUsage();
      for (let i = 0; i < N; i++) await fn();
      const used = process.cpuUsage(started);
      out[name].push((used.user + used.system) / N / per);
    }
  }
  const o = median(out.old);
  const n = median(out.new);
  console.log(`${piece.padEnd(13)} old ${o.toFixed(2)} µs  new ${n.toFixed(2)} µs  ×${(n / o).toFixed(2)}`);
}

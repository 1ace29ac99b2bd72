import type { AccountStore } from "../../store/store.js";
import type { UpstreamAccountRow } from "../../store/rows.js";
import { finiteNumbers } from "../../store/values.js";
import { durationStats, upstreamAccounts, upstreamReads } from "./schema.js";
import type { Database_, Db } from "./open.js";
import type { DbOrTx } from "./tx.js";
import { and, eq, gt } from "drizzle-orm";
import { clientOf, prepared } from "./prepared.js";
import type { SqliteContext } from "./context.js";
import { sweepInChunks } from "./group-commit.js";
import { recentSamples } from "../kit/recent-samples.js";

/** The AccountStore on SQLite: upstream accounts, learned limits, the read budget, duration samples. */
export function sqliteAccounts(s: SqliteContext): AccountStore {
  const db = s.database.db;
  // A model's samples read once a SAMPLES_FRESH_MS for the creations that follow, as on PostgreSQL.
  const recent = recentSamples(async (type, model) => {
    const text = prepared(db, "accounts.durationSamples", () =>
      s.database.sqlite.prepare("SELECT samples_json FROM duration_stats WHERE type = ? AND model = ?").pluck(),
    ).get(type, model) as string | undefined;
    return text ?? null;
  });
  return {
    state: async (account) => state(db, account),
    updateState: async (account, patch, now) => updateState(db, account, patch, now),
    takeRead: async (account, at, limit, windowMs) => {
      // Counted in SQLite and bounded by the limit: the window can hold a minute of reads (100,000
      // with a large budget), and reading them all into JS on every take cost 25-35 ms of one turn.
      const used = prepared(db, "accounts.readsUsed", () =>
        s.database.sqlite
          .prepare("SELECT count(*) FROM (SELECT 1 FROM upstream_reads WHERE account = ? AND at > ? LIMIT ?)")
          .pluck(),
      );
      // A unit of the group commit, not a transaction (and a WAL sync) of its own per read: a sweep's
      // takes share one commit, and each take yields the turn until it (issue #38 item 7). Atomic: the
      // count writes nothing, the insert is one statement; takes queued before it count in its window.
      return s.intakeCommits.runAtomic((tx) => {
        if ((used.get(account, at - windowMs, limit) as number) >= limit) return false;
        recordRead(tx, account, at);
        return true;
      });
    },
    readsSince: async (account, since) => readsSince(db, account, since),
    // A minute of reads can be 100,000 rows: deleted a chunk per unit of the group commit, not in one turn.
    pruneReads: async (account, before) => {
      await sweepInChunks(s.intakeCommits, "all", PRUNE_CHUNK_READS, (_tx, rows) =>
        pruneReads(s.database, account, before, rows),
      );
    },
    // Every creation's answer reads it (its estimate, services/tasks.ts): prepared once on the
    // connection (building the select cost intake more than running it, 80 µs a request; drizzle
    // filling its placeholders and mapping the row, 20-40 µs more under the profiler).
    durationSamples: async (type, model) => {
      // Parsed per call: the caller may change the array it gets (DurationStats adds to it).
      const text = await recent.text(type, model);
      return text === null ? [] : (JSON.parse(text) as number[]);
    },
    saveDurationSamples: async (type, model, samples, now) => {
      const samplesJson = JSON.stringify(finiteNumbers(samples, "duration samples"));
      db.insert(durationStats)
        .values({ type, model, samplesJson, updatedAt: now })
        .onConflictDoUpdate({ target: [durationStats.type, durationStats.model], set: { samplesJson, updatedAt: now } })
        .run();
      recent.forget(type, model);
    },
  };
}

/**
 * An account's state, on a statement prepared once on the connection and mapped by hand: every
 * submission and every creation's estimate reads it (issue #43: drizzle building the select was
 * about 90 µs a task end to end under the profiler). The columns are plain integers and text.
 */
export function state(db: Db, id: string): UpstreamAccountRow | undefined {
  const r = prepared(db, "accounts.state", () =>
    clientOf(db)
      .prepare(
        "SELECT id, learned_max_concurrent, learned_at, reads_paused_until, submit_paused_until, updated_at FROM upstream_accounts WHERE id = ?",
      )
      .raw(true),
  ).get(id) as [string, number | null, number | null, number | null, number | null, number] | undefined;
  return r === undefined
    ? undefined
    : {
        id: r[0],
        learnedMaxConcurrent: r[1],
        learnedAt: r[2],
        readsPausedUntil: r[3],
        submitPausedUntil: r[4],
        updatedAt: r[5],
      };
}

export function updateState(
  db: Db,
  id: string,
  patch: Partial<typeof upstreamAccounts.$inferInsert>,
  now: number,
): void {
  db.insert(upstreamAccounts)
    .values({ id, updatedAt: now, ...patch })
    .onConflictDoUpdate({ target: upstreamAccounts.id, set: { ...patch, updatedAt: now } })
    .run();
}

export function recordRead(db: DbOrTx, account: string, at: number): void {
  db.insert(upstreamReads).values({ account, at }).run();
}

export function readsSince(db: DbOrTx, account: string, since: number): number[] {
  return db
    .select({ at: upstreamReads.at })
    .from(upstreamReads)
    .where(and(eq(upstreamReads.account, account), gt(upstreamReads.at, since)))
    .orderBy(upstreamReads.at)
    .all()
    .map((r) => r.at);
}

/** Reads deleted per unit of the group commit when a window is pruned. */
const PRUNE_CHUNK_READS = 2_000;

/** Deletes up to `limit` of an account's reads made before `before`; answers how many. */
export function pruneReads(database: Database_, account: string, before: number, limit: number): number {
  // The driver's own statement, as takeRead's count: a value the store refuses is refused as such.
  return prepared(database.db, "accounts.pruneReads", () =>
    database.sqlite.prepare(
      "DELETE FROM upstream_reads WHERE rowid IN (SELECT rowid FROM upstream_reads WHERE account = ? AND at < ? LIMIT ?)",
    ),
  ).run(account, before, limit).changes;
}

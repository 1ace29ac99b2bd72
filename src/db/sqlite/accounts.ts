import type { AccountStore } from "../../store/store.js";
import { finiteNumbers } from "../../store/values.js";
import { durationStats } from "./schema.js";
import { getAccountState, pruneReads, readsSince, recordRead, upsertAccountState } from "../upstream.js";
import { and, eq } from "drizzle-orm";
import type { SqliteContext } from "./context.js";

/** The AccountStore on SQLite: upstream accounts, learned limits, the read budget, duration samples. */
export function sqliteAccounts(s: SqliteContext): AccountStore {
  const db = s.database.db;
  return {
    state: async (account) => getAccountState(db, account),
    updateState: async (account, patch, now) => upsertAccountState(db, account, patch, now),
    takeRead: async (account, at, limit, windowMs) =>
      db.transaction((tx) => {
        if (readsSince(tx, account, at - windowMs).length >= limit) return false;
        recordRead(tx, account, at);
        return true;
      }),
    readsSince: async (account, since) => readsSince(db, account, since),
    pruneReads: async (account, before) => pruneReads(db, account, before),
    durationSamples: async (type, model) => {
      const row = db
        .select()
        .from(durationStats)
        .where(and(eq(durationStats.type, type), eq(durationStats.model, model)))
        .get();
      return row ? (JSON.parse(row.samplesJson) as number[]) : [];
    },
    saveDurationSamples: async (type, model, samples, now) => {
      const samplesJson = JSON.stringify(finiteNumbers(samples, "duration samples"));
      db.insert(durationStats)
        .values({ type, model, samplesJson, updatedAt: now })
        .onConflictDoUpdate({ target: [durationStats.type, durationStats.model], set: { samplesJson, updatedAt: now } })
        .run();
    },
  };
}

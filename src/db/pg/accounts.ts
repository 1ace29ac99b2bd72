import type { AccountStore } from "../../store/store.js";
import { finiteNumbers } from "../../store/values.js";
import { U, opt, type Row } from "./mapping.js";
import type { PgContext } from "./context.js";
import { recentSamples } from "../kit/recent-samples.js";

/**
 * Every creation's answer reads its model's samples (its estimate): a named statement, prepared once
 * per connection, where an unnamed one was planned on every creation (0.06–0.08 ms of the server's
 * planning a creation, pg_stat_statements with track_planning).
 */
const DURATION_SAMPLES = {
  name: "genrelay_duration_samples",
  text: "SELECT samples_json FROM duration_stats WHERE type = $1 AND model = $2",
};

/** The AccountStore on PostgreSQL: upstream accounts, learned limits, the shared read budget, duration samples. */
export function pgAccounts(s: PgContext): AccountStore {
  const { q, one } = s;
  const recent = recentSamples((type, model) =>
    s.pool
      .query({ ...DURATION_SAMPLES, values: [type, model] })
      .then((r) => ((r.rows[0] as Row | undefined)?.samples_json as string | undefined) ?? null),
  );
  return {
    state: async (account) => opt(U, await one("SELECT * FROM upstream_accounts WHERE id = $1", [account])),
    updateState: async (account, patch, now) => {
      const full = { ...patch, updatedAt: now };
      const ins = U.insert("upstream_accounts", { id: account, ...full });
      const set = U.set(full, ins.values.length + 1);
      await s.pool.query(`${ins.sql} ON CONFLICT (id) DO UPDATE SET ${set.sql}`, [...ins.values, ...set.values]);
    },
    takeRead: (account, at, limit, windowMs) =>
      s.tx(async (c) => {
        // The account row's lock serialises takers across instances: two leaders overlapping for a
        // moment still cannot spend more than the window allows between them.
        await q(
          "INSERT INTO upstream_accounts (id, updated_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
          [account, at],
          c,
        );
        await q("SELECT id FROM upstream_accounts WHERE id = $1 FOR UPDATE", [account], c);
        const used = Number(
          (await one(
            // Bounded by the limit: the window can hold a minute of reads with a large budget.
            "SELECT count(*) AS n FROM (SELECT 1 FROM upstream_reads WHERE account = $1 AND at > $2 LIMIT $3) AS w",
            [account, at - windowMs, limit],
            c,
          ))!.n,
        );
        if (used >= limit) return false;
        await q("INSERT INTO upstream_reads (account, at) VALUES ($1, $2)", [account, at], c);
        return true;
      }),
    readsSince: async (account, since) =>
      (await q("SELECT at FROM upstream_reads WHERE account = $1 AND at > $2 ORDER BY at", [account, since])).map((r) =>
        Number(r.at),
      ),
    pruneReads: async (account, before) => {
      await s.pool.query("DELETE FROM upstream_reads WHERE account = $1 AND at < $2", [account, before]);
    },
    durationSamples: async (type, model) => {
      // Parsed per call: the caller may change the array it gets (DurationStats adds to it).
      const text = await recent.text(type, model);
      return text === null ? [] : (JSON.parse(text) as number[]);
    },
    saveDurationSamples: async (type, model, samples, now) => {
      await s.pool.query(
        `INSERT INTO duration_stats (type, model, samples_json, updated_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (type, model) DO UPDATE SET samples_json = EXCLUDED.samples_json, updated_at = EXCLUDED.updated_at`,
        [type, model, JSON.stringify(finiteNumbers(samples, "duration samples")), now],
      );
      recent.forget(type, model);
    },
  };
}

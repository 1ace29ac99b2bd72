import type { SessionStore } from "../../store/store.js";
import { S, opt } from "./mapping.js";
import type { PgContext } from "./context.js";

/** The SessionStore on PostgreSQL: dashboard sessions. */
export function pgSessions(s: PgContext): SessionStore {
  const { q, one } = s;
  return {
    open: (row, now) =>
      s.tx(async (c) => {
        await q("DELETE FROM dashboard_sessions WHERE expires_at < $1 OR revoked_at IS NOT NULL", [now], c);
        const ins = S.insert("dashboard_sessions", row);
        await q(ins.sql, ins.values, c);
      }),
    find: async (hash) => opt(S, await one("SELECT * FROM dashboard_sessions WHERE token_hash = $1", [hash])),
    touch: async (hash, now) => {
      await s.pool.query("UPDATE dashboard_sessions SET last_seen_at = $2 WHERE token_hash = $1", [hash, now]);
    },
    revoke: async (hash, now) => {
      await s.pool.query("UPDATE dashboard_sessions SET revoked_at = $2 WHERE token_hash = $1 AND revoked_at IS NULL", [
        hash,
        now,
      ]);
    },
  };
}

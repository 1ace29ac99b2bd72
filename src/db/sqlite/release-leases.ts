import { sql } from "drizzle-orm";
import type { Db } from "./open.js";
import { events, tasks } from "./schema.js";

/**
 * Releases every lease of one owner (graceful shutdown), so a restart need not wait for expiry. The
 * owner's tokens are `<prefix>:…`, matched as a plain prefix of characters: LIKE would read `_` and
 * `%` in the prefix as wildcards, ignore case on SQLite and refuse a pattern over 50,000 bytes.
 */
export function releaseLeases(db: Db, ownerPrefix: string): number {
  const owner = `${ownerPrefix}:`;
  const released = (table: typeof tasks | typeof events) =>
    db
      .update(table)
      .set({ claimedUntil: null, claimToken: null })
      .where(sql`substr(${table.claimToken}, 1, length(${owner})) = ${owner}`)
      .run().changes;
  return released(tasks) + released(events);
}

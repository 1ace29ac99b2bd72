import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * better-sqlite3 quirk: `.get()` on a single INSERT/UPDATE/DELETE … RETURNING outside a transaction
 * returns the row and ignores a failed implicit commit (disk full), so a write could report success
 * without being stored. Every write in src/ uses `.run()`/`.all()` (or runs inside a transaction).
 */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sourceFiles(join(dir, d.name)) : d.name.endsWith(".ts") ? [join(dir, d.name)] : [],
  );
}

/**
 * Statements (split on `;`) that write, return rows, and end in `.get(`: a drizzle write with
 * `.returning(`, or SQL text with INSERT/UPDATE/DELETE … RETURNING (a prepared statement). A write
 * without RETURNING cannot be read with `.get()` at all (better-sqlite3 throws), and a Map's
 * `.delete(`/`.get(` in one statement is no write.
 */
function writesEndingInGet(source: string): string[] {
  const drizzleWrite = /\.(insert|update|delete)\s*\([\s\S]*\.returning\s*\(/;
  const sqlWrite = /\b(INSERT|UPDATE|DELETE)\b[\s\S]*\bRETURNING\b/;
  return source
    .split(";")
    .filter((stmt) => (drizzleWrite.test(stmt) || sqlWrite.test(stmt)) && /\.get\s*\(/.test(stmt))
    .map((stmt) => stmt.trim().slice(0, 120));
}

describe("writes commit or raise", () => {
  it("no write statement in src/ is read with .get()", () => {
    const offenders = sourceFiles("src").flatMap((file) =>
      writesEndingInGet(readFileSync(file, "utf8")).map((s) => `${file}: ${s}`),
    );
    expect(offenders).toEqual([]);
  });

  it("the check recognises a write read with .get()", () => {
    expect(writesEndingInGet("return db.update(t).set(p).where(x).returning().get();")).toHaveLength(1);
    expect(writesEndingInGet("return db.update(t).set(p).where(x).returning().all()[0];")).toHaveLength(0);
    expect(writesEndingInGet("return db.select().from(t).get();")).toHaveLength(0);
    expect(writesEndingInGet('return db.prepare("UPDATE t SET a = 1 RETURNING *").get();')).toHaveLength(1);
    expect(writesEndingInGet("for (const k of m.keys()) if (m.get(k) === 0) m.delete(k);")).toHaveLength(0);
  });
});

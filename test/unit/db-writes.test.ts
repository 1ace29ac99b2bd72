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

/** Statements (split on `;`) that write and end in `.get(`. */
function writesEndingInGet(source: string): string[] {
  return source
    .split(";")
    .filter((stmt) => /\.(insert|update|delete)\s*\(/.test(stmt) && /\.get\s*\(/.test(stmt))
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
  });
});

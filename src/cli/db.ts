import { BackupError, backupDatabase } from "../db/sqlite/backup.js";
import type { PgStore } from "../db/pg/store.js";
import { pgDatabaseStats } from "../db/pg/stats.js";
import { databaseFileSizes, databaseStats } from "../db/sqlite/stats.js";
import { iso, out, parse, positionalsAtMost, UsageError } from "./common.js";
import type { CliContext } from "./context.js";

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = -1;
  do {
    v /= 1024;
    i++;
  } while (v >= 1024 && i < units.length - 1);
  return `${v.toFixed(1)} ${units[i]}`;
}

async function backup(args: string[], ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(args, { force: { type: "boolean" }, json: { type: "boolean" } });
  const file = positionals[0];
  if (!file) throw new UsageError("db backup needs a FILE to write the copy to");
  positionalsAtMost(positionals, 1, "db backup");
  if (ctx.config.databaseUrl) {
    throw new UsageError(
      'DATABASE_URL is set: back up PostgreSQL with its own tools, e.g. pg_dump --format=custom --file=genrelay.dump "$DATABASE_URL" (restore with pg_restore); see docs/deployment.md',
    );
  }
  const database = ctx.open({ mustExist: true, migrate: false });
  const started = performance.now();
  let result;
  try {
    result = await backupDatabase(database.sqlite, ctx.config.databasePath, file, { overwrite: values.force === true });
  } catch (err) {
    if (err instanceof BackupError) throw new UsageError(err.message);
    throw err;
  }
  const ms = Math.round(performance.now() - started);
  if (values.json)
    out(JSON.stringify({ path: result.path, bytes: result.bytes, pages: result.pages, check: result.check, ms }));
  else
    out(
      `backed up ${ctx.config.databasePath} to ${result.path} (${formatBytes(result.bytes)}, ${result.pages} pages, integrity ${result.check}, ${ms} ms)`,
    );
  return 0;
}

async function stats(args: string[], ctx: CliContext): Promise<number> {
  const { values, positionals } = parse(args, { json: { type: "boolean" } });
  positionalsAtMost(positionals, 0, "db stats");
  if (ctx.config.databaseUrl) return pgStats(values.json === true, ctx);
  const path = ctx.config.databasePath;
  // Observation only: the schema is counted as found, never migrated.
  const s = databaseStats(ctx.open({ mustExist: true, migrate: false }).db);
  const files = databaseFileSizes(path);
  const oldestPending = iso(s.deliveries.oldest_pending_at);
  if (values.json) {
    out(JSON.stringify({ path, files, ...s, deliveries: { ...s.deliveries, oldest_pending_at: oldestPending } }));
    return 0;
  }
  out(`database  ${path}`);
  out(
    `size      ${formatBytes(files.total)} (file ${formatBytes(files.database)}, WAL ${formatBytes(files.wal)}, shm ${formatBytes(files.shm)}; ${s.pages.freelist_count} of ${s.pages.page_count} pages free)`,
  );
  printCounts(s, oldestPending);
  return 0;
}

async function pgStats(json: boolean, ctx: CliContext): Promise<number> {
  const store = await ctx.store();
  const s = await pgDatabaseStats((store as PgStore).pool);
  const oldestPending = iso(s.deliveries.oldest_pending_at);
  if (json) {
    out(
      JSON.stringify({
        database: "postgresql",
        ...s,
        deliveries: { ...s.deliveries, oldest_pending_at: oldestPending },
      }),
    );
    return 0;
  }
  out(`database  PostgreSQL (DATABASE_URL), ${formatBytes(s.bytes)}`);
  printCounts(s, oldestPending);
  return 0;
}

/** The part of `db stats` both databases print alike: rows per table, tasks, deliveries. */
function printCounts(
  s: {
    tables: Record<string, number>;
    tasks_by_status: Record<string, number>;
    tasks_by_phase: Record<string, number>;
    deliveries: { pending: number; failed: number; succeeded: number; none: number };
  },
  oldestPending: string | null,
): void {
  const pad = Math.max(...Object.keys(s.tables).map((t) => t.length), 10);
  out("");
  out("rows");
  for (const [table, n] of Object.entries(s.tables)) out(`  ${table.padEnd(pad)}  ${n}`);
  out("");
  out(
    `tasks by status  ${Object.entries(s.tasks_by_status)
      .map(([k, n]) => `${k}=${n}`)
      .join("  ")}`,
  );
  out(
    `tasks by phase   ${Object.entries(s.tasks_by_phase)
      .map(([k, n]) => `${k}=${n}`)
      .join("  ")}`,
  );
  out(
    `deliveries       pending=${s.deliveries.pending}  failed=${s.deliveries.failed}  succeeded=${s.deliveries.succeeded}  no_callback=${s.deliveries.none}`,
  );
  if (oldestPending) out(`oldest pending   ${oldestPending}`);
}

/** `db <sub>`: backup, stats. */
export async function runDb(sub: string, args: string[], ctx: CliContext): Promise<number> {
  switch (sub) {
    case "backup":
      return backup(args, ctx);
    case "stats":
      return stats(args, ctx);
    default:
      throw new UsageError(`unknown command: db ${sub}`);
  }
}

// The read budget's takeRead on SQLite with a full window (issue #38 item 7, sixth round): CPU-ms per
// take when the window already holds READS reads, this build beside an old one, on a file database
// (WAL, the relay's pragmas). Each build in its own child process, order rotated, medians of ROUNDS.
//
//   node bench/read-budget-take.mjs [oldDist=/work/old6/dist] [rounds=3]   (BENCH_QUICK=1: 500 reads)
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { DIST } from "./lib/dist.mjs";
import { median, round } from "./lib/stats.mjs";

const READS = process.env.BENCH_QUICK === "1" ? 500 : 3_000;

/** In a child: fills one account's window with READS takes, then times READS more; prints CPU-ms per take. */
const CHILD = `
const [dist, path, reads] = process.argv.slice(1);
const { openDatabase } = await import(dist + "/db/sqlite/open.js");
const { sqliteStore } = await import(dist + "/open-store.js");
const store = sqliteStore(openDatabase(path));
const now = Date.now();
for (let i = 0; i < +reads; i++) await store.accounts.takeRead("acct", now + i, 1e6, 600000);
const cpu0 = process.cpuUsage();
for (let i = 0; i < +reads; i++) await store.accounts.takeRead("acct", now + +reads + i, 1e6, 600000);
const cpu = process.cpuUsage(cpu0);
console.log((cpu.user + cpu.system) / 1000 / +reads);
`;

function once(dist, tmp, name) {
  const out = execFileSync(
    process.execPath,
    ["--input-type=module", "-e", CHILD, pathToFileURL(dist).href, join(tmp, `${name}.db`), String(READS)],
    { encoding: "utf8" },
  );
  return Number(out.trim());
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const oldDist = process.argv[2] ?? "/work/old6/dist";
  const rounds = Number(process.argv[3] ?? 3);
  const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-take-"));
  const load_start = os.loadavg().map((x) => round(x, 2));
  const builds = [
    { name: "new", dist: DIST },
    { name: "old", dist: oldDist },
  ];
  const ms = { new: [], old: [] };
  try {
    for (let r = 0; r < rounds; r++)
      for (const b of r % 2 === 0 ? builds : [...builds].reverse())
        ms[b.name].push(once(b.dist, tmp, `${b.name}-${r}`));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const ratios = ms.new.map((x, i) => x / ms.old[i]);
  console.log(
    JSON.stringify({
      method: `takeRead CPU-ms per take with ${READS}..${2 * READS} reads in the window, file database, medians of ${rounds}`,
      load_start,
      new_cpu_ms: round(median(ms.new), 3),
      old_cpu_ms: round(median(ms.old), 3),
      new_over_old: round(median(ratios), 2),
      rounds: { new: ms.new.map((x) => round(x, 3)), old: ms.old.map((x) => round(x, 3)) },
      load_end: os.loadavg().map((x) => round(x, 2)),
    }),
  );
}

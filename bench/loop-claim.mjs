// The dispatcher loop's claim alone (src/db/sqlite/event-claims.ts claimDue, as the loop calls it:
// keyRoom, the pool's room) on an outbox of N due events of one delivery key at its cap, so left
// out: CPU µs a claim (process.cpuUsage, median of 9, each claim rolled back so every one sees the
// same outbox), and the loop's next-due probe after it (events.ts nextDueAt, the key left out).
// Before the eleventh round the claim walked the whole backlog (docs/performance.md).
//   node bench/loop-claim.mjs DIST [events=3000]
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createClient } from "./lib/proc.mjs";
import { prepareSeeding, seedPendingEvents } from "./lib/seed.mjs";

const dist = resolve(process.argv[2] ?? "dist");
const N = Number(process.argv[3] ?? 3000);
process.env.BENCH_DIST = dist;
const load = (rel) => import(pathToFileURL(join(dist, rel)).href);
const tmp = mkdtempSync(join(os.tmpdir(), "genrelay-loop-claim-"));
await prepareSeeding();
const path = join(tmp, "c.db");
const { id } = await createClient(path, "loop-claim", dist);
seedPendingEvents(path, id, N, "http://127.0.0.1:9/hook");
const { openDatabase } = await load("db/sqlite/open.js");
const { sqliteStore } = await load("open-store.js");
const { claimDue } = await load("db/sqlite/event-claims.js");
const { nextDueAt } = await load("db/sqlite/events.js");
const store = sqliteStore(openDatabase(path));
const sqlite = store.database.sqlite;
const host = sqlite.prepare("SELECT destination_host AS h FROM events LIMIT 1").get().h;
const now = Date.now() + 60_000;
// The pool of 64 with the key's 8 in flight: a claim of 56, the key left out.
const claim = () => {
  sqlite.exec("SAVEPOINT probe");
  try {
    return claimDue(store.database.db, {
      now,
      leaseMs: 30_000,
      token: "loop",
      limit: 56,
      excludeKeys: [`${id}|${host}`],
      keyRoom: () => 8,
      maxPerKey: 8,
    });
  } finally {
    sqlite.exec("ROLLBACK TO probe; RELEASE probe");
  }
};
const probe = () => nextDueAt(store.database.db, { now, excludeKeys: [`${id}|${host}`] });
/** CPU µs of `fn` a call, 9 calls after a first, sorted. */
const cpuOf = (fn) => {
  fn();
  const times = [];
  for (let i = 0; i < 9; i++) {
    const c0 = process.cpuUsage();
    fn();
    const c = process.cpuUsage(c0);
    times.push(c.user + c.system);
  }
  return times.sort((a, b) => a - b);
};
const claims = cpuOf(claim);
const probes = cpuOf(probe);
console.log(
  JSON.stringify({
    dist,
    events: N,
    claim_cpu_us_median: claims[4],
    next_due_cpu_us_median: probes[4],
    next_due: probe() === null ? null : probe() - now,
    claim_cpu_us: claims,
    next_due_cpu_us: probes,
  }),
);
await store.close();
rmSync(tmp, { recursive: true, force: true });

// What one NOTIFY costs where every instance LISTENs (issue #43): PostgreSQL's CPU (the postmaster and its
// children) and the listeners' (`LISTENERS` node processes, each a pg client LISTENing as a relay's session
// does), per committed single-row INSERT, with and without a pg_notify in the same statement (the creation
// batch's INSERT_BATCH_NOTIFY), rounds alternating. `node bench/notify-cost.mjs [statements] [rounds] [listeners]`.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { cpuMsOf, treeCpuSnapshot } from "./lib/proc.mjs";
import { median, round } from "./lib/stats.mjs";
import { startPostgres } from "./postgres.mjs";

if (process.argv[2] === "--listener") {
  const c = new pg.Client({ connectionString: process.argv[3] });
  await c.connect();
  let heard = 0;
  c.on("notification", () => heard++);
  await c.query("LISTEN genrelay_bench");
  process.on("message", (m) => (m === "count" ? process.send(heard) : c.end().then(() => process.exit(0))));
  process.send("ready");
} else {
  const [N = 2000, ROUNDS = 3, LISTENERS = 3] = process.argv.slice(2).map(Number);
  const server = await startPostgres({ flags: ["checkpoint_timeout=1h", "max_wal_size=4GB"] });
  const url = server.admin;
  const sender = new pg.Client({ connectionString: url });
  await sender.connect();
  await sender.query("CREATE TABLE IF NOT EXISTS notify_bench (x int)");
  const pidOf = (await sender.query("SELECT pg_backend_pid() AS p")).rows[0].p;
  const listeners = await Promise.all(
    Array.from({ length: LISTENERS }, async () => {
      const child = fork(fileURLToPath(import.meta.url), ["--listener", url]);
      await new Promise((resolve) => child.once("message", resolve));
      return child;
    }),
  );
  const statements = {
    plain: { name: "plain", text: "INSERT INTO notify_bench VALUES (1)" },
    notify: {
      name: "notify",
      text: "WITH ins AS (INSERT INTO notify_bench VALUES (1) RETURNING x) SELECT pg_notify('genrelay_bench', 'created:default') FROM ins",
    },
  };
  const measure = async (kind) => {
    const db0 = treeCpuSnapshot(server.pid());
    const l0 = listeners.map((l) => cpuMsOf(l.pid));
    const s0 = process.cpuUsage();
    for (let i = 0; i < N; i++) await sender.query(statements[kind]);
    // Let the listeners take what was sent.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const s1 = process.cpuUsage(s0);
    const db1 = treeCpuSnapshot(server.pid());
    let dbMs = 0;
    for (const [pid, cpu] of db1) dbMs += cpu - (db0.get(pid) ?? 0);
    const lMs = listeners.reduce((s, l, i) => s + cpuMsOf(l.pid) - l0[i], 0);
    return {
      server: (dbMs * 1000) / N,
      listeners: (lMs * 1000) / N,
      sender: ((s1.user + s1.system) / 1000 / N) * 1000,
    };
  };
  const results = { plain: [], notify: [] };
  for (let r = 0; r < ROUNDS; r++)
    for (const kind of r % 2 ? ["notify", "plain"] : ["plain", "notify"]) results[kind].push(await measure(kind));
  const med = (kind, k) => round(median(results[kind].map((x) => x[k])), 1);
  console.log(
    `${N} statements × ${ROUNDS} rounds, ${LISTENERS} listeners, sender backend ${pidOf}; µs CPU per statement, medians:`,
  );
  for (const k of ["server", "listeners", "sender"])
    console.log(
      `  ${k.padEnd(9)} plain ${med("plain", k)}  with NOTIFY ${med("notify", k)}  NOTIFY's share ${round(med("notify", k) - med("plain", k), 1)}`,
    );
  for (const l of listeners) l.send("end");
  await sender.end();
  await server.stop();
}

